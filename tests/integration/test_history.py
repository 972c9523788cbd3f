"""Partitioned history: finished jobs leave the hot table for partitions of their status and
UTC day (``PQJOBS["HISTORY_AFTER"]`` after they finished), every read still finds them, an
operator's Retry or Skip brings one back, and RETENTION drops whole partitions.
"""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections
from django.urls import reverse

from django_pqjobs import enqueue_job, enqueue_many, retry_job
from django_pqjobs.models import Dependency, Job, JobAttempt, Signal, Step
from django_pqjobs.operations import skip_jobs
from django_pqjobs.testing import drain
from django_pqjobs.transitions import history
from django_pqjobs.worker import housekeeping
from tests.helpers import bound, check_ids, drop_history_partitions, make_user, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

DAY = 86400.0


@pytest.fixture(autouse=True)
def _no_partition_outlives_its_test():
    yield
    drop_history_partitions()


def finished(status: str, ago: float, count: int = 1, **columns: Any) -> list[int]:
    """``count`` jobs of ``status`` that finished ``ago`` seconds ago."""
    names = ", ".join(columns)
    values = "".join(f", %({name})s" for name in columns)
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO pqjobs_job (job_type, payload, status, attempts, max_attempts, "
            f"finished_at{', ' + names if names else ''}) "
            f"SELECT 't', '{{}}', %(status)s, 1, 1, now() - make_interval(secs => %(ago)s)"
            f"{values} FROM generate_series(1, %(count)s) RETURNING id",
            {"status": status, "ago": ago, "count": count, **columns},
        )
        return sorted(row[0] for row in cursor.fetchall())


def partition_of(job_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM pqjobs_job WHERE id = %s", [job_id])
        row = cursor.fetchone()
    return row[0] if row else ""


def part(status: str, ago: float, span: int = 1, table: str = "job") -> str:
    """The name of the partition of ``status`` jobs that finished ``ago`` seconds ago."""
    start = history.span_start((datetime.now(UTC) - timedelta(seconds=ago)).date(), span)
    return f"pqjobs_{table}_{status}_{start:%Y%m%d}_{span}"


def partitions(prefix: str = "pqjobs_job_") -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('pqjobs_job'::regclass, 'pqjobs_attempt'::regclass)"
        )
        return {row[0] for row in cursor.fetchall() if row[0].startswith(prefix)}


def test_finished_jobs_go_to_the_partition_of_their_status_and_day(settings):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    [old_done] = finished("done", 2.5 * DAY)
    [old_failed] = finished("failed", 1.2 * DAY, last_error="boom")
    JobAttempt.objects.create(job_id=old_failed, attempt=1, worker_id="w", outcome="error")
    [recent] = finished("done", 60)  # not HISTORY_AFTER old yet
    ready = enqueue_job("t")

    moved = housekeeping.shelve_finished("default")

    assert moved == {"done": 1, "failed": 1, "cancelled": 0, "expired": 0}
    # a partition spans a seventh of the status's retention: 1 day for done, 5 for failed
    assert partition_of(old_done) == part("done", 2.5 * DAY)
    assert partition_of(old_failed) == part("failed", 1.2 * DAY, span=5)
    assert partition_of(recent) == partition_of(ready) == "pqjobs_job_hot"
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM pqjobs_attempt")
        assert cursor.fetchall() == [(part("failed", 1.2 * DAY, span=5, table="attempt"),)]
    # today's and tomorrow's partitions are made ahead, for every status shelved
    assert {part("done", -DAY), part("expired", -DAY), part("failed", -DAY, 5)} <= partitions()
    assert housekeeping.shelve_finished("default") == dict.fromkeys(moved, 0)  # idempotent


def test_every_read_finds_a_job_in_history(settings):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    days = (0.5, 1.5, 2.5, 3.5)
    done = [finished("done", d * DAY, 3) for d in days]
    [failed] = finished("failed", 2 * DAY, last_error="ValueError: boom")
    JobAttempt.objects.create(
        job_id=failed, attempt=1, worker_id="w", outcome="error", traceback="Traceback: boom"
    )
    live = enqueue_job("t")
    housekeeping.shelve_finished("default")
    assert len({partition_of(ids[0]) for ids in done}) == len(days)  # one partition a day

    # the ORM: counts, filters and the newest-first order across partitions
    every = sorted(i for ids in done for i in ids)
    assert Job.objects.filter(status="done").count() == len(every)
    assert list(Job.objects.filter(status="done").values_list("id", flat=True)) == every[::-1]
    assert Job.objects.get(pk=failed).failed_attempts.get().traceback == "Traceback: boom"
    assert list(Job.objects.values_list("id", flat=True)[:2]) == [live, failed]
    # the admin: the list by status, and the job's page with its attempts
    client = make_user("operator", "view_job")
    page = client.get(reverse("admin:django_pqjobs_job_changelist") + "?status__exact=failed")
    assert page.status_code == 200 and f"/{failed}/" in page.content.decode()
    page = client.get(reverse("admin:django_pqjobs_job_change", args=[failed]))
    assert page.status_code == 200 and "Traceback: boom" in page.content.decode()


def test_a_job_that_still_holds_its_dedupe_key_stays_in_the_hot_table(settings):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    hour = timedelta(hours=1)
    [holding] = finished(
        "done", 2 * DAY, dedupe_key="k", unique_states=1, unique_until=datetime.now(UTC) + hour
    )
    [window_over] = finished(
        "done", 2 * DAY, dedupe_key="k", unique_states=1, unique_until=datetime.now(UTC) - hour
    )
    [forever] = finished("done", 2 * DAY, dedupe_key="f", unique_states=1)
    [not_held] = finished("done", 2 * DAY, dedupe_key="f")  # its states do not hold "done"

    housekeeping.shelve_finished("default")

    assert partition_of(holding) == partition_of(forever) == "pqjobs_job_hot"
    assert partition_of(window_over).startswith("pqjobs_job_done_")
    assert partition_of(not_held).startswith("pqjobs_job_done_")
    assert enqueue_job("t", dedupe_key="f", unique_states=("done",)) == forever  # still held


def test_retry_and_skip_bring_a_job_back_from_history_with_its_attempts(settings):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    retried, skipped = finished("failed", 2 * DAY, 2, last_error="boom")
    for job_id in (retried, skipped):
        JobAttempt.objects.create(job_id=job_id, attempt=1, worker_id="w", outcome="error")
    housekeeping.shelve_finished("default")
    assert partition_of(retried).startswith("pqjobs_job_failed_")

    assert retry_job(retried)
    assert skip_jobs([skipped]) == [skipped]

    assert partition_of(retried) == partition_of(skipped) == "pqjobs_job_hot"
    assert Job.objects.get(pk=retried).status == "ready"
    assert Job.objects.get(pk=skipped).status == "cancelled"
    with connection.cursor() as cursor:
        cursor.execute("SELECT DISTINCT tableoid::regclass::text FROM pqjobs_attempt")
        assert cursor.fetchall() == [("pqjobs_attempt_hot",)]
    assert [run.job_id for run in drain()] == [retried]
    assert Job.objects.get(pk=retried).status == "done"


def test_a_status_change_in_place_is_refused_rather_than_lost(settings):
    """A statement that would change a shelved job's status without bringing it back first
    fails: the partition's CHECK holds one status (the job never hides in history)."""
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    [job_id] = finished("failed", 2 * DAY)
    housekeeping.shelve_finished("default")
    with pytest.raises(DatabaseError, match="violates check constraint"):
        Job.objects.filter(pk=job_id).update(status="ready")
    assert Job.objects.get(pk=job_id).status == "failed"


def test_retention_drops_whole_partitions_with_what_hangs_off_their_jobs(settings):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}  # done: 7 days, 1 a partition
    [ancient] = finished("done", 6.5 * DAY)
    [recent] = finished("done", 2 * DAY)
    [other_day] = finished("done", 4.2 * DAY)  # kept: its day is not all past the retention
    JobAttempt.objects.create(job_id=ancient, attempt=1, worker_id="w", outcome="error")
    Step.objects.create(job_id=ancient, name="charge", kind="step", attempt=1)
    Signal.objects.create(job_id=ancient, name="paid")
    Dependency.objects.create(job_id=recent, depends_on_id=ancient)
    housekeeping.shelve_finished("default")
    assert partition_of(ancient) == part("done", 6.5 * DAY)

    deleted = housekeeping.prune("default", {"done": 5 * DAY})

    assert deleted["done"] == 1
    assert part("done", 6.5 * DAY) not in partitions()
    assert part("done", 6.5 * DAY, table="attempt") not in partitions("pqjobs_attempt_")
    assert not Job.objects.filter(pk=ancient).exists()
    assert Job.objects.filter(pk__in=[recent, other_day]).count() == 2
    assert not JobAttempt.objects.exists() and not Step.objects.exists()
    assert not Signal.objects.exists()
    # the edge of the job that waited for it stays with that job (pqjobs_job_forget;
    # tests/integration/test_delete_cascade.py)
    assert list(Dependency.objects.values_list("job_id", "depends_on_id")) == [(recent, ancient)]


def test_a_status_kept_less_than_a_day_stays_hot_and_is_pruned_row_by_row(settings):
    settings.PQJOBS = {
        **settings.PQJOBS,
        "HISTORY_AFTER": 60,
        "RETENTION": {"cancelled": 3600, "done": None},
    }
    [cancelled] = finished("cancelled", 1800)
    [done] = finished("done", 1800)
    moved = housekeeping.shelve_finished("default")
    assert "cancelled" not in moved and moved["done"] == 1
    assert partition_of(cancelled) == "pqjobs_job_hot"
    [gone] = finished("cancelled", 7200)
    assert housekeeping.prune("default", {"cancelled": 3600})["cancelled"] == 1
    assert not Job.objects.filter(pk=gone).exists()
    assert Job.objects.filter(pk__in=[cancelled, done]).count() == 2


@pytest.mark.parametrize(
    ("kept", "span"), [(3600, 1), (7 * DAY, 1), (8 * DAY, 2), (30 * DAY, 5), (400 * DAY, 31)]
)
def test_a_partition_spans_a_seventh_of_the_retention(kept, span):
    assert history.span_for(kept) == span
    assert history.span_for(None) == 31  # kept for ever: a month a partition
    start = history.span_start(datetime(2026, 11, 27).date(), span)
    assert (start - history.EPOCH).days % span == 0 and 0 <= (
        datetime(2026, 11, 27).date() - start
    ).days < span


def test_history_after_none_keeps_every_job_in_the_hot_table(settings):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": None}
    [job_id] = finished("done", 2 * DAY)
    assert housekeeping.shelve_finished("default") == {}
    assert partition_of(job_id) == "pqjobs_job_hot"
    assert "pqjobs.E038" in check_ids(HISTORY_AFTER=-5)
    assert "pqjobs.E038" in check_ids(HISTORY_AFTER="soon")
    assert "pqjobs.E038" not in check_ids(HISTORY_AFTER=None)


@pytest.mark.parametrize(
    ("call", "args", "message"),
    [
        ("pqjobs_history_prepare(%s::text[])", [["done/2026-02-30/1"]], "names no day"),
        ("pqjobs_history_prepare(%s::text[])", [["ready/2026-01-01/1"]], "is not a history"),
        ("pqjobs_history_prepare(%s::text[])", [["done/2026-01-01/1; DROP"]], "is not a"),
        ("pqjobs_history_prepare(%s::text[])", [["done/2026-01-01/32"]], "1 to 31 days"),
        ("pqjobs_history_prepare(%s::text[])", [["done/2026-01-01"]], "is not a history"),
        ("pqjobs_history_prepare(%s::text[])", [[None]], "NULL is not a history"),
        ("pqjobs_history_prepare(%s::text[])", [["done/2026-01-02/7"]], "starts no span"),
        ("pqjobs_history_prepare(%s::text[])", [["done/1969-12-31/1"]], "starts no span"),
        ("pqjobs_history_prepare(%s::text[])", [["done/9999-12-31/1"]], "after tomorrow"),
        ("pqjobs_history_prepare(%s::text[])", [["done/2026-01-01/1"] * 17], "at most 16"),
        ("pqjobs_history_shelve(%s, %s)", [[1], ["hot"]], "not a history shelf"),
        ("pqjobs_history_shelve(%s, %s)", [[1, 2], ["done/2026-01-01/1"]], "2 ids and 1"),
        ("pqjobs_history_drop(%s, current_date)", ["running"], "is not a finished status"),
        ("pqjobs_history_drop(%s, NULL)", ["done"], "the day to drop before is missing"),
    ],
)
def test_the_partition_functions_refuse_what_is_not_a_shelf(call, args, message):
    with pytest.raises(DatabaseError, match=message), connection.cursor() as cursor:
        cursor.execute(f"SELECT {call}", args)


def test_partitions_made_and_dropped_under_a_running_drain_lose_no_job(settings, worker_factory):
    """A worker drains 6,000 jobs while another connection makes and drops partitions and
    moves finished jobs into them: every job runs exactly once, none goes missing, and no
    finished job is touched (the queued jobs lie at the same places, TIDs, in the hot
    partition as finished ones in their history partition)."""
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600, "RETENTION": {"done": None}}
    old = finished("done", 5 * DAY, 500)
    housekeeping.shelve_finished("default")
    with connection.cursor() as cursor:
        cursor.execute("VACUUM pqjobs_job_hot")
    ids = enqueue_many("tests.noop", [{"n": n} for n in range(6000)])
    more = finished("done", 4 * DAY, 500)  # moved while the worker drains
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pqjobs_job h JOIN pqjobs_job_hot q ON q.ctid = h.ctid "
            "WHERE h.shelf <> 'hot' AND q.status = 'ready'"
        )
        assert cursor.fetchone()[0] > 100  # the same TIDs in both
    stop = threading.Event()
    done_at_each_cycle: list[int] = []
    errors: list[BaseException] = []

    def churn() -> None:
        day = datetime.now(UTC).date() - timedelta(days=40)
        try:
            while not stop.is_set():
                day += timedelta(days=1)
                history.prepare("default", [history.shelf("done", day, 1)])
                assert history.drop_expired("default", "done", 30 * DAY) == 0
                housekeeping.shelve_finished("default")
                done_at_each_cycle.append(
                    Job.objects.filter(job_type="tests.noop", status="done").count()
                )
        except BaseException as exc:  # reported by the test
            errors.append(exc)
        finally:
            connections["default"].close()

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        wait_for(lambda: done_at_each_cycle or errors, 30)
        worker_factory(concurrency=2)
        wait_for(lambda: not Job.objects.filter(pk__in=ids).exclude(status="done").exists(), 90)
        wait_for(lambda: len(done_at_each_cycle) >= 3 or errors, 30)
    finally:
        stop.set()
        churner.join(bound(30))
    assert errors == []
    # partitions came and went while the worker drained
    assert any(0 < done < len(ids) for done in done_at_each_cycle), done_at_each_cycle
    assert Job.objects.filter(pk__in=ids, status="done", attempts=1).count() == len(ids)
    assert all(partition_of(job_id).startswith("pqjobs_job_done_") for job_id in old + more)
    assert Job.objects.filter(pk__in=old + more, status="done", attempts=1).count() == 1000


def test_a_partition_drop_that_fails_leaves_the_hot_table_pruned(monkeypatch, caplog):
    """A drop that cannot take its lock in time (a long transaction on pqjobs_job) or that
    the role may not run is logged; the prune of the hot table goes on."""

    def refused(alias: str, status: str, kept: float) -> int:
        raise DatabaseError("canceling statement due to lock timeout")

    monkeypatch.setattr(history, "drop_expired", refused)
    [old] = finished("done", 8 * DAY)
    assert housekeeping.prune("default", {"done": 7 * DAY})["done"] == 1
    assert not Job.objects.filter(pk=old).exists()
    assert "history partitions of done jobs not dropped: canceling statement" in caplog.text


def test_a_workers_maintenance_moves_finished_jobs_to_history(settings, worker_factory):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 1}
    [old] = finished("done", 2 * DAY)
    job_id = enqueue_job("tests.noop")
    worker_factory(concurrency=1, heartbeat_interval=0.2)  # its history step: 1.2 s after start
    wait_for(lambda: partition_of(old) == part("done", 2 * DAY), 20)
    wait_for(lambda: partition_of(job_id) == part("done", 0), 20)  # done, then 1 s later


def test_prune_jobs_moves_a_whole_tables_history_at_once(settings):
    from io import StringIO

    from django.core.management import call_command

    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    done = finished("done", 2 * DAY, 30) + finished("done", 3600, 20)
    [failed] = finished("failed", 5 * DAY)
    out = StringIO()
    call_command("prune_jobs", stdout=out)
    assert "history: moved 51 to their partitions (finished over 10 minutes ago)" in out.getvalue()
    assert {partition_of(job_id) for job_id in done} == {
        part("done", 2 * DAY),
        part("done", 3600),
    }
    assert partition_of(failed) == part("failed", 5 * DAY, span=5)


def test_prepare_makes_no_more_than_its_cap_a_call_and_the_mover_asks_again():
    """A thousand shelves in one call would fill the server's lock table: the function takes
    16, and the mover's prepare() asks in turns."""
    today = datetime.now(UTC).date()
    shelves = [history.shelf("done", today - timedelta(days=n), 1) for n in range(20)]
    with (
        pytest.raises(DatabaseError, match="20 shelves in one call, at most 16"),
        connection.cursor() as cursor,
    ):
        cursor.execute("SELECT pqjobs_history_prepare(%s::text[])", [shelves])
    assert history.prepare("default", shelves) == 20
    assert len(partitions("pqjobs_job_done_")) == 20
    tomorrow = history.shelf("done", today + timedelta(days=1), 1)
    assert history.prepare("default", [tomorrow]) == 1  # the mover makes tomorrow's ahead


@pytest.fixture
def squatter():
    """A role that may CREATE in the tables' schema (PostgreSQL 14 and older let every
    role), as a deployment's other application might have."""
    name = f"pqjobs_squatter_{uuid.uuid4().hex[:10]}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {name}")
        cursor.execute(f"GRANT CREATE ON SCHEMA public TO {name}")
    try:
        yield name
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
            cursor.execute(f"DROP OWNED BY {name}")
            cursor.execute(f"DROP ROLE {name}")


def as_role(role: str, statement: str) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {role}")
        try:
            cursor.execute(statement)
        finally:
            cursor.execute("RESET ROLE")


@pytest.mark.parametrize("which", ["job", "attempt"])
def test_a_partition_name_taken_first_is_named_with_its_owner(squatter, which, settings, capsys):
    """Skipped, a squatted name left its shelf with no partition (or, for the job table's
    name, prepare answered 0 with nothing attached) and every move to it failed, pass after
    pass: now prepare fails naming the table and its owner, and jobs_health says so."""
    from django.core.management import call_command

    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    [job_id] = finished("done", 2 * DAY)
    taken = part("done", 2 * DAY, table=which)
    as_role(squatter, f"CREATE TABLE public.{taken} (anything text)")
    with pytest.raises(DatabaseError) as raised:
        housekeeping.shelve_finished("default")
    assert f"public.{taken} exists and is no history partition" in str(raised.value)
    assert f"a table owned by {squatter}" in str(raised.value)
    assert partition_of(job_id) == "pqjobs_job_hot"  # nothing half made: all rolled back
    call_command("jobs_health", "--skip-worker")
    warned = capsys.readouterr().err
    assert (
        f"history partition names taken by objects that are not ours: {taken} (owner "
        f"{squatter})" in warned
    ), warned

    as_role(squatter, f"DROP TABLE public.{taken}")
    as_role(squatter, f"CREATE TYPE public.{taken} AS ENUM ('x')")  # a type takes it too
    with pytest.raises(DatabaseError, match=f"a type owned by {squatter}"):
        housekeeping.shelve_finished("default")
    as_role(squatter, f"DROP TYPE public.{taken}")
    housekeeping.shelve_finished("default")
    assert partition_of(job_id) == part("done", 2 * DAY)
    call_command("jobs_health", "--skip-worker")
    assert "history partition names taken" not in capsys.readouterr().err


def test_dropping_history_drops_only_our_attempt_partition(squatter, settings):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    finished("done", 2 * DAY)
    housekeeping.shelve_finished("default")
    attempts = part("done", 2 * DAY, table="attempt")
    with connection.cursor() as cursor:  # (as prepare before the check made it possible)
        cursor.execute(f"DROP TABLE {attempts}")
    as_role(squatter, f"CREATE TABLE public.{attempts} (anything text)")
    history.drop_expired("default", "done", 0)
    assert part("done", 2 * DAY) not in partitions()
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pg_get_userbyid(relowner) FROM pg_class WHERE relname = %s", [attempts]
        )
        assert cursor.fetchall() == [(squatter,)]  # the superuser that owns ours left it be


def test_a_duplicated_id_answers_the_hot_job_not_500(admin_client, settings):
    """Were an id ever held twice (only the tables' owner can still make one), the job's
    page, its actions and wait_for answer for the job in the hot table."""
    from django_pqjobs import wait_for as wait_for_job

    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    [shelved] = finished("done", 2 * DAY)
    housekeeping.shelve_finished("default")
    with connection.cursor() as cursor:  # as the owner: the entry check lets it in
        cursor.execute(
            "INSERT INTO pqjobs_job (id, job_type, payload, status, result, finished_at) "
            "VALUES (%s, 'twin', '{}', 'done', '{\"twin\": true}', now())",
            [shelved],
        )
    page = admin_client.get(reverse("admin:django_pqjobs_job_change", args=[shelved]))
    assert page.status_code == 200
    assert b"twin" in page.content
    assert wait_for_job(shelved, timeout=bound(5)) == {"twin": True}


def test_prune_jobs_cuts_history_in_the_spans_the_workers_cut(settings):
    """A retention given on prune_jobs's command line prunes by it, but the partitions made
    span what PQJOBS["RETENTION"] gives (a seventh of it), as the workers' maintenance
    makes them: not spans of the command line's retention beside them."""
    from io import StringIO

    from django.core.management import call_command

    settings.PQJOBS = {
        **settings.PQJOBS,
        "HISTORY_AFTER": 600,
        "RETENTION": {**settings.PQJOBS.get("RETENTION", {}), "done": 70 * DAY},
    }
    [old] = finished("done", 2 * DAY)
    call_command("prune_jobs", "--done", "30d", stdout=StringIO())
    assert partition_of(old) == part("done", 2 * DAY, span=10)
    assert {name.rsplit("_", 1)[1] for name in partitions("pqjobs_job_done_")} == {"10"}
    housekeeping.shelve_finished("default")  # the workers' step: no other partition
    assert {name.rsplit("_", 1)[1] for name in partitions("pqjobs_job_done_")} == {"10"}


def test_the_commands_reference_shows_every_retention_flag_of_prune_jobs():
    from tests.helpers import ROOT

    text = (ROOT / "docs" / "reference" / "commands.md").read_text()
    synopsis = next(line for line in text.splitlines() if line.startswith("manage.py prune_jobs"))
    missing = [s for s in housekeeping.RETAINED if f"[--{s} " not in synopsis]
    assert not missing, f"docs/reference/commands.md's prune_jobs lacks {missing}"
