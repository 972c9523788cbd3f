"""The database roles of docs/guides/reliability.md, granted exactly as the page shows.

A real ``run_jobs`` process logs in as a role holding only the worker grants and does all a
worker does: rescue, claim, complete, retry, fail, heartbeat, chained jobs, schedules,
pruning and a clean stop; so do the maintenance commands. The web and admin grants are
exercised on the test's own connection with ``SET ROLE``. The roles have unique names and
are dropped at the end.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.db.utils import ProgrammingError
from django.urls import reverse

from django_pqjobs import (
    DuplicateJob,
    batch,
    cancel_job,
    enqueue_batch,
    enqueue_job,
    enqueue_many,
    enqueue_on_commit,
    get_batch,
    retry_job,
    send_signal,
)
from django_pqjobs.clock import database_now
from django_pqjobs.flow import pause_queue, resume_queue
from django_pqjobs.models import (
    ConcurrencySetting,
    Job,
    JobAttempt,
    OperatorAction,
    Schedule,
    Step,
    WorkerRecord,
)
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import (
    ROOT,
    bound,
    documented_sql,
    drop_history_partitions,
    run_jobs,
    wait_for,
    wait_status,
)

pytestmark = pytest.mark.django_db(transaction=True)


@dataclass(frozen=True)
class Roles:
    web: str
    worker: str
    admin: str
    worker_login: str  # a LOGIN member of the worker group, as a deployment would have
    admin_login: str  # a LOGIN member of the admin group (operators' commands)


@pytest.fixture
def roles() -> Iterator[Roles]:
    suffix = uuid.uuid4().hex[:10]
    made = Roles(
        web=f"pqjobs_web_{suffix}",
        worker=f"pqjobs_worker_{suffix}",
        admin=f"pqjobs_admin_{suffix}",
        worker_login=f"pqjobs_worker_login_{suffix}",
        admin_login=f"pqjobs_admin_login_{suffix}",
    )
    documented = documented_sql("guides/reliability.md", "grants")
    grants = re.sub(
        r"\bpqjobs_(web|worker|admin)_role\b", lambda m: getattr(made, m.group(1)), documented
    )
    assert grants.count(suffix) == documented.count("_role")
    try:
        with connection.cursor() as cursor:
            cursor.execute(grants)
            cursor.execute(f"CREATE ROLE {made.worker_login} LOGIN IN ROLE {made.worker}")
            cursor.execute(f"CREATE ROLE {made.admin_login} LOGIN IN ROLE {made.admin}")
        yield made
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")
            for role in (made.worker_login, made.admin_login, made.web, made.worker, made.admin):
                cursor.execute(
                    "SELECT 1 FROM pg_roles WHERE rolname = %s", [role]
                )  # a failed setup may have stopped before creating it
                if cursor.fetchone():
                    cursor.execute(f"DROP OWNED BY {role}")  # its grants in this database
                    cursor.execute(f"DROP ROLE {role}")


@contextmanager
def acting_as(role: str) -> Iterator[None]:
    """Run the block's queries on the test's connection with the privileges of ``role``."""
    with connection.cursor() as cursor:
        cursor.execute(f"SET ROLE {role}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET ROLE")


def denied(statement: str) -> bool:
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement)
    except ProgrammingError as exc:
        assert "permission denied" in str(exc), exc
        return True
    return False


@pytest.mark.slow
def test_a_worker_with_only_the_worker_grants_does_everything_a_worker_does(roles):
    now = database_now("default")
    # Left behind by a worker that died an hour ago: to be rescued.
    lost = Job.objects.create(
        job_type="tests.echo",
        status="running",
        attempts=1,
        locked_by="ghost",
        locked_at=now - timedelta(hours=1),
        heartbeat_at=now - timedelta(hours=1),
    )
    # Finished long ago, past the default retention of done jobs (7 days): to be pruned.
    old = Job.objects.create(job_type="tests.noop", status="done", finished_at=now - timedelta(30))
    JobAttempt.objects.create(job=old, attempt=1, worker_id="w", outcome="error", traceback="")
    schedule = Schedule.objects.create(
        name="every-second", job_type="tests.echo", interval_seconds=1, next_run_at=now
    )
    host, port = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    as_worker = {
        "DATABASE_URL": f"postgres://{roles.worker_login}@{host}:{port}/unused",
        "WORKER_STALE_TIMEOUT": "3",  # heartbeats every second, pruning after 6 s
        "WORKER_REAP_INTERVAL": "1",
    }
    with run_jobs("--concurrency", "2", "--worker-id", "least-privileged", **as_worker) as worker:
        with acting_as(roles.web):  # the web role enqueues
            echo = enqueue_job("tests.echo", {"n": 1})
            (failing,) = enqueue_many("tests.fail", [{}], dedupe_keys=["f"], dedupe="error")
            permanent = enqueue_job("tests.permanent")
            chain = enqueue_job("tests.chain")
            sleeper = enqueue_job("tests.sleep", {"seconds": 3})
            flow = enqueue_job("tests.workflow_plain")

        assert wait_status(echo, "done").locked_by == "least-privileged"
        assert wait_status(lost.pk, "done").attempts == 2
        assert JobAttempt.objects.get(job_id=lost.pk).outcome == "lost"
        retried = wait_for(
            lambda: Job.objects.filter(pk=failing, status="ready", attempts=1).first(), 30
        )
        assert JobAttempt.objects.get(job_id=failing).outcome == "error"
        assert retried.run_after > database_now("default")
        assert wait_status(permanent, "failed").error_type == "PermanentError"
        child = wait_status(chain, "done").result["child"]
        assert wait_status(child, "done").parent_id == chain

        wait_status(sleeper, "running")
        assert WorkerRecord.objects.filter(worker_id="least-privileged").exists()
        first_beat = Job.objects.get(pk=sleeper).heartbeat_at
        wait_for(lambda: Job.objects.get(pk=sleeper).heartbeat_at > first_beat)
        wait_status(sleeper, "done")

        # a durable workflow: steps, a sleep, parked for its signal, which the web role sends
        wait_for(
            lambda: Job.objects.filter(
                pk=flow, status="waiting", waiting_for=0, steps__name="confirmed"
            ).exists(),
            timeout=30,
        )
        with acting_as(roles.web):
            assert send_signal(flow, "confirmed", "yes")
        assert wait_status(flow, "done").result == {"first": {"n": 1}, "reply": "yes"}

        fired = wait_for(lambda: Job.objects.filter(schedule_id=schedule.pk, status="done"), 30)
        schedule.refresh_from_db()
        assert schedule.last_job_id is not None and fired
        wait_for(lambda: not Job.objects.filter(pk=old.pk).exists())
        assert not JobAttempt.objects.filter(job_id=old.pk).exists()

        worker.signal(signal.SIGTERM)
        assert worker.wait(120) == 0
        output = worker.output()
    assert "permission denied" not in output, output
    assert "Traceback" not in output, output
    assert not WorkerRecord.objects.filter(worker_id="least-privileged").exists()
    # The maintenance commands need nothing more; the audit trail is left to the owner.
    for command in (["reap_stale"], ["prune_jobs"], ["list_schedules"]):
        done = manage(command, as_worker)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if command == ["prune_jobs"]:
            assert "operator actions: not pruned" in done.stdout
    # An operator action is not the worker's: refused with the reason, nothing enqueued.
    before = Job.objects.filter(schedule_id=schedule.pk).count()
    refused = manage(["trigger_schedule", "every-second"], as_worker)
    assert refused.returncode == 1
    assert "may not add to the audit trail" in refused.stderr, refused.stderr
    assert Job.objects.filter(schedule_id=schedule.pk).count() == before


def manage(command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "django", *command],
        cwd=ROOT,
        env={
            **os.environ,
            **env,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PQJOBS_TEST_DATABASE": connection.settings_dict["NAME"],
        },
        capture_output=True,
        text=True,
        timeout=bound(60),
    )


def test_batches_and_dependencies_need_only_the_documented_grants(roles):
    host, port = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    as_worker = {"DATABASE_URL": f"postgres://{roles.worker_login}@{host}:{port}/unused"}
    with acting_as(roles.web):  # the web role enqueues a batch and a dependent
        with batch(on_success="tests.batch_counts") as opened:
            first = enqueue_job("tests.echo", {"n": 1})
            enqueue_job("tests.echo", {"n": 2})
        last = enqueue_job("tests.dependency_results", depends_on=[first])
        assert get_batch(opened.id).total == 2
    with run_jobs("--concurrency", "2", "--worker-id", "least-privileged", **as_worker) as worker:
        callback = wait_for(lambda: Job.objects.filter(callback_of_id=opened.id).first(), 30)
        assert wait_status(callback.pk, "done").result["done"] == 2
        assert wait_status(last, "done").result == {
            str(first): {"echo": {"n": 1}, "attempt": 1, "worker": "least-privileged"}
        }
        output = worker.output()
    assert "permission denied" not in output, output


def test_the_web_role_enqueues_and_reads_results_and_nothing_more(roles):
    done = enqueue_job("tests.echo")
    Job.objects.filter(pk=done).update(status="done", result={"ok": True})
    with acting_as(roles.web):
        assert Job.objects.get(pk=done).result == {"ok": True}
        job_id = enqueue_job("t", {"a": 1}, dedupe_key="k")
        assert enqueue_job("t", dedupe_key="k") == job_id
        with pytest.raises(DuplicateJob):
            enqueue_job("t", dedupe_key="k", dedupe="error")
        replaced = enqueue_job("t", dedupe_key="k", dedupe="replace")
        ids = enqueue_many("t", [{}] * 3, dedupe_keys=["a", "b", "k"], dedupe="replace")
        with transaction.atomic():
            enqueue_on_commit("t", {"on": "commit"})
        assert cancel_job(ids[0]) == "cancelled" and retry_job(ids[0])
        assert cancel_job(ids[1], by="support-bot") == "cancelled"
        first = enqueue_job("tests.sequenced", {"account": 1})  # a sequence, a deadline
        second = enqueue_job("tests.sequenced", {"account": 1}, expires_in="1h")
        for statement in (
            f"DELETE FROM pqjobs_job WHERE id = {done}",
            "SELECT * FROM pqjobs_attempt",
            "SELECT * FROM pqjobs_worker",
            "UPDATE pqjobs_schedule SET enabled = false",
        ):
            assert denied(statement), statement
    assert Job.objects.get(pk=job_id).status == "cancelled"
    assert Job.objects.get(pk=replaced).status == "cancelled"  # replaced by the bulk call
    assert OperatorAction.objects.get().actor == "support-bot"
    assert Job.objects.filter(payload={"on": "commit"}).exists()
    assert list(Job.objects.filter(pk__in=[first, second]).values_list("status", flat=True)) == [
        "waiting",
        "ready",
    ]  # newest first


def _grant_the_projects_own_tables(role: str) -> None:
    """What a project gives its web role besides the job tables: Django's own tables."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT string_agg(quote_ident(tablename), ', ') FROM pg_tables "
            "WHERE schemaname = 'public' AND (tablename LIKE 'auth\\_%%' "
            "OR tablename LIKE 'django\\_%%')"
        )
        (tables,) = cursor.fetchone()
        assert "pqjobs" not in tables
        cursor.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON {tables} TO {role}")


def test_the_admin_role_runs_the_operator_console(roles, client):
    failed = enqueue_job("t")
    Job.objects.filter(pk=failed).update(status="failed")
    JobAttempt.objects.create(job_id=failed, attempt=1, worker_id="w", outcome="error")
    delayed = enqueue_job("t", delay=3600)
    ready = enqueue_job("t")
    finished = enqueue_job("t")
    Job.objects.filter(pk=finished).update(status="done")
    stuck = enqueue_job("t", priority=100)
    claim_jobs("default", "stuck-worker", None, 1)
    schedule = Schedule.objects.create(name="s", job_type="tests.noop", interval_seconds=60)
    WorkerRecord.objects.create(worker_id="w1", hostname="h", concurrency=1)
    members = enqueue_batch("t", [{}, {}], on_finish="t")
    dependent = enqueue_job("t", depends_on=[ready])  # cancelled with it, below
    _grant_the_projects_own_tables(roles.admin)
    client.force_login(User.objects.create_superuser("root", password="pw"))
    jobs = reverse("admin:django_pqjobs_job_changelist")
    schedules = reverse("admin:django_pqjobs_schedule_changelist")
    with acting_as(roles.admin):
        for page in (
            jobs,
            f"{jobs}?status__exact=failed",
            reverse("admin:django_pqjobs_job_change", args=[failed]),
            reverse("admin:django_pqjobs_job_dashboard"),
            schedules,
            reverse("admin:django_pqjobs_schedule_change", args=[schedule.pk]),
            reverse("admin:django_pqjobs_batch_changelist"),
            reverse("admin:django_pqjobs_batch_change", args=[members.id]),
            f"{jobs}?batch__id__exact={members.id}",
            reverse("admin:django_pqjobs_job_change", args=[dependent]),
            f"{jobs}?dependents_of={ready}",
        ):
            assert client.get(page).status_code == 200, page

        def act(url: str, action: str, ids: list[int], **more: str) -> None:
            data = {"action": action, "_selected_action": ids, **more}
            assert client.post(url, data, follow=True).status_code == 200, action

        act(jobs, "retry_action", [failed])
        act(jobs, "run_now_action", [delayed])
        act(jobs, "cancel_action", [ready])
        deleted = client.post(f"{jobs}{finished}/delete/", {"post": "yes"}, follow=True)
        assert deleted.status_code == 200
        release = {"worker": "stuck-worker", "attempt": "1"}
        assert client.post(f"{jobs}{stuck}/release/", release, follow=True).status_code == 200
        for verb in ("pause", "resume"):
            url = reverse("admin:django_pqjobs_job_pause", args=[verb])
            data = {"kind": "queue", "name": "emails"}
            assert client.post(url, data, follow=True).status_code == 200, verb
        assert (
            client.get(reverse("admin:django_pqjobs_operatoraction_changelist")).status_code == 200
        )
        act(schedules, "run_now", [schedule.pk])
        act(schedules, "disable_schedules", [schedule.pk])
        assert denied(
            "INSERT INTO pqjobs_worker (worker_id, hostname, concurrency) VALUES ('x', 'h', 1)"
        )
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses[failed] == "ready" and statuses[ready] == "cancelled"
    assert statuses[dependent] == "cancelled"  # the database cancelled it at the commit
    assert Job.objects.get(pk=delayed).run_after <= database_now("default")
    assert finished not in statuses
    assert statuses[stuck] == "ready"  # released
    assert Job.objects.filter(schedule_id=schedule.pk).exists()  # run now enqueued its job
    assert not Schedule.objects.get(pk=schedule.pk).enabled
    assert set(OperatorAction.objects.values_list("action", flat=True)) == {
        "retry",
        "run_now",
        "cancel",
        "delete",
        "release",
        "pause",
        "resume",
        "schedule_run_now",
        "schedule_disable",
    }


def test_the_worker_role_cannot_delete_schedules(roles):
    Schedule.objects.create(name="s", job_type="tests.noop", interval_seconds=60)
    with acting_as(roles.worker):
        assert denied("DELETE FROM pqjobs_schedule")


def test_operator_commands_run_with_the_admin_grants(roles):
    schedule = Schedule.objects.create(name="nightly", job_type="tests.noop", interval_seconds=60)
    host, port = connection.settings_dict["HOST"], connection.settings_dict["PORT"]
    as_admin = {"DATABASE_URL": f"postgres://{roles.admin_login}@{host}:{port}/unused"}
    done = manage(["trigger_schedule", "nightly", "--by", "alice"], as_admin)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert Job.objects.filter(schedule_id=schedule.pk).count() == 1
    assert OperatorAction.objects.get(schedule_id=schedule.pk).actor == "alice"
    done = manage(["set_concurrency", "3", "--workers", "web", "--by", "alice"], as_admin)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert ConcurrencySetting.objects.get(pk="web").concurrency == 3


INTERNAL_FUNCTIONS = (
    "SELECT pqjobs_batch_finished(1)",
    "SELECT pqjobs_settle()",
    "SELECT pqjobs_note_changes()",
    "SELECT pqjobs_flow_admit()",
    "SELECT pqjobs_flow_hold_paused()",
    "SELECT pqjobs_flow_slot_freed()",
    "SELECT pqjobs_announce_finish()",
    "SELECT pqjobs_job_entry_check()",
    "SELECT pqjobs_job_status_check()",
)
# The "may not" column of the guide's role table, statement by statement.
MAY_NOT = {
    "web": (
        "DELETE FROM pqjobs_job",
        "SELECT * FROM pqjobs_attempt",
        "INSERT INTO pqjobs_attempt (job_id, attempt, worker_id, outcome) "
        "VALUES (1, 1, 'w', 'error')",
        "DELETE FROM pqjobs_attempt",
        "SELECT * FROM pqjobs_worker",
        "INSERT INTO pqjobs_worker (worker_id, hostname, concurrency) VALUES ('x', 'h', 1)",
        "SELECT * FROM pqjobs_schedule",
        "UPDATE pqjobs_schedule SET enabled = false",
        "SELECT * FROM pqjobs_audit",
        "INSERT INTO pqjobs_pause (kind, name) VALUES ('queue', 'q')",
        "INSERT INTO pqjobs_concurrency (name, concurrency) VALUES ('*', 1)",
        "SELECT pqjobs_claim('w', 1)",
        # only the columns its operations write: never a result, attempts, a shelf or an id
        "UPDATE pqjobs_job SET result = '{}'",
        "UPDATE pqjobs_job SET attempts = 0",
        "UPDATE pqjobs_job SET progress = '{}'",
        "UPDATE pqjobs_job SET shelf = 'done/2026-01-01/1'",
        "UPDATE pqjobs_job SET id = id + 1",
        "SELECT pqjobs_history_prepare(ARRAY['done/2026-01-01/1'])",
        "SELECT pqjobs_history_shelve('{1}', '{done/2026-01-01/1}')",
        *INTERNAL_FUNCTIONS,
    ),
    "worker": (
        "DELETE FROM pqjobs_schedule",
        "INSERT INTO pqjobs_pause (kind, name) VALUES ('queue', 'q')",
        "DELETE FROM pqjobs_pause",
        "INSERT INTO pqjobs_concurrency (name, concurrency) VALUES ('*', 1)",
        "UPDATE pqjobs_concurrency SET concurrency = 1",
        "INSERT INTO pqjobs_audit (actor, action, target, detail) "
        "VALUES ('alice', 'retry', '', '')",
        "UPDATE pqjobs_audit SET actor = 'mallory'",
        "DELETE FROM pqjobs_audit",
        *INTERNAL_FUNCTIONS,
    ),
    "admin": (
        "INSERT INTO pqjobs_worker (worker_id, hostname, concurrency) VALUES ('x', 'h', 1)",
        "UPDATE pqjobs_worker SET concurrency = 1",
        "DELETE FROM pqjobs_worker",
        "UPDATE pqjobs_audit SET actor = 'mallory'",
        "DELETE FROM pqjobs_audit",
        "INSERT INTO pqjobs_key_slot (key, running, last_grant) VALUES ('k', 0, 0)",
        "SELECT pqjobs_claim('w', 1)",
        *INTERNAL_FUNCTIONS,
    ),
}


@pytest.mark.parametrize("group", sorted(MAY_NOT))
def test_every_may_not_of_the_guide_is_refused(roles, group):
    OperatorAction.objects.create(actor="alice", action="retry", job_id=1)
    with acting_as(getattr(roles, group)):
        allowed = [statement for statement in MAY_NOT[group] if not denied(statement)]
    assert allowed == []
    assert OperatorAction.objects.get().actor == "alice"


def test_history_runs_with_the_documented_grants(roles, settings):
    """The worker role moves finished jobs to their partitions (made with the owner's rights
    by pqjobs_history_prepare) and drops them past RETENTION; a retry from the web role or
    the admin's brings a job back, its attempt too, which neither role may read."""
    from django_pqjobs.worker import housekeeping

    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    old, web_retry, admin_retry = (enqueue_job("t") for _ in range(3))
    Job.objects.filter(pk=old).update(
        status="done", finished_at=database_now("default") - timedelta(days=6)
    )
    Job.objects.filter(pk__in=[web_retry, admin_retry]).update(
        status="failed", finished_at=database_now("default") - timedelta(days=2)
    )
    for job_id in (web_retry, admin_retry):
        JobAttempt.objects.create(job_id=job_id, attempt=1, worker_id="w", outcome="error")
    try:
        with acting_as(roles.worker):
            assert housekeeping.shelve_finished("default") == {
                "done": 1,
                "failed": 2,
                "cancelled": 0,
                "expired": 0,
            }
            for statement in (
                "SELECT pqjobs_history_prepare(ARRAY['done/2026-01-01/1'])",
                "SELECT pqjobs_history_drop('done', '2000-01-01')",
            ):
                assert not denied(statement), statement  # granted to the worker role
        with acting_as(roles.web):
            assert retry_job(web_retry)
            assert denied("SELECT pqjobs_history_drop('done', '2000-01-01')")
        with acting_as(roles.admin):
            assert retry_job(admin_retry)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT DISTINCT tableoid::regclass::text FROM pqjobs_attempt "
                "WHERE job_id = ANY(%s)",
                [[web_retry, admin_retry]],
            )
            assert cursor.fetchall() == [("pqjobs_attempt_hot",)]
        with acting_as(roles.worker):
            assert housekeeping.prune("default", {"done": 3 * 86400})["done"] == 1
        assert not Job.objects.filter(pk=old).exists()
    finally:
        drop_history_partitions()


def refused_by_the_database(statement: str, *params: object) -> str:
    """The message of the error ``statement`` meets (insufficient privilege), or ''."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(statement, list(params) or None)
    except ProgrammingError as exc:
        assert getattr(exc.__cause__, "sqlstate", None) == "42501", exc
        return str(exc)
    return ""


def test_the_web_role_may_not_give_a_job_an_id_or_a_shelf(roles, settings):
    """Since history partitions the primary key is the hot table's alone: a job inserted
    with a shelved job's id made two jobs of one id (the admin's page answered 500, and the
    trigger that brought attempts back moved the shelved job's with the owner's rights)."""
    from django_pqjobs.worker import housekeeping

    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    shelved = enqueue_job("t")
    Job.objects.filter(pk=shelved).update(
        status="done", finished_at=database_now("default") - timedelta(days=2)
    )
    try:
        housekeeping.shelve_finished("default")
        columns = "(id, job_type, payload, status, finished_at, shelf)"
        with acting_as(roles.web):
            mine = enqueue_job("t")  # the web role enqueues as ever (ids drawn)
            for shelf, status in (("hot", "done"), ("hot", "ready")):
                said = refused_by_the_database(
                    f"INSERT INTO pqjobs_job {columns} VALUES (%s, 't', '{{}}', %s, now(), %s)",
                    shelved,
                    status,
                    shelf,
                )
                assert f"this row came with id {shelved}" in said, said
            said = refused_by_the_database(
                "INSERT INTO pqjobs_job (job_type, payload, status, finished_at, shelf) "
                "VALUES ('t', '{}', 'done', now(), %s)",
                history_shelf(Job.objects.get(pk=shelved)),
            )  # a new job straight into history, its id drawn
            assert "in the hot table" in said, said
            assert "permission denied" in refused_by_the_database(
                "UPDATE pqjobs_job SET id = %s WHERE id = %s", shelved, mine
            )
        with (  # and the owner may not change an id either
            connection.cursor() as cursor,
            pytest.raises(ProgrammingError, match="a job's id never changes"),
        ):
            cursor.execute("UPDATE pqjobs_job SET id = %s WHERE id = %s", [shelved, mine])
        assert Job.objects.filter(pk=shelved).count() == 1
    finally:
        drop_history_partitions()


def history_shelf(job: Job) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT shelf FROM pqjobs_job WHERE id = %s", [job.pk])
        return str(cursor.fetchone()[0])


def test_the_web_role_makes_only_the_status_moves_of_its_operations(roles):
    """With UPDATE on status (cancel, retry) the web role could forge a job done, failed or
    running, or end a workflow's sleep: a role that may not write results may make only the
    moves cancel, retry, dependencies and send_signal make."""
    ready = enqueue_job("t")
    parked = enqueue_job("t")
    Job.objects.filter(pk=parked).update(status="waiting", waiting_for=0)
    Step.objects.create(job_id=parked, name="nap", kind="sleep", attempt=1)
    with acting_as(roles.web):
        for status in ("done", "failed", "running", "expired", "blocked"):
            said = refused_by_the_database(
                "UPDATE pqjobs_job SET status = %s WHERE id = %s", status, ready
            )
            assert f"may not make job {ready} {status} (it was ready)" in said, said
        said = refused_by_the_database(
            "UPDATE pqjobs_job SET status = 'ready' WHERE id = %s", parked
        )
        assert f"may not make job {parked} ready (it was waiting)" in said, said
        assert cancel_job(ready) == "cancelled" and retry_job(ready)  # its own moves
    assert Job.objects.get(pk=parked).status == "waiting"
    assert Job.objects.get(pk=ready).status == "ready"
    # A retry into a paused queue is held at once (pqjobs_job_retried_paused), which the
    # guard lets the web role make: the hold is the retry's, not a status of its choosing.
    pause_queue("default")
    with acting_as(roles.web):
        assert cancel_job(ready) == "cancelled" and retry_job(ready)
    assert Job.objects.filter(pk=ready, status="blocked", blocked_by="paused").exists()
    resume_queue("default")
    assert Job.objects.get(pk=ready).status == "ready"
