"""Unique jobs (issue 28): a dedupe key held for a window (unique_for), in finished
statuses (unique_states), derived from the payload (unique_by); enforced by one unique index
of PostgreSQL under any number of enqueuers and workers."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter
from datetime import timedelta

import psycopg
import pytest
from django.db import connection, connections, transaction

from django_pqjobs import (
    DuplicateJob,
    InvalidJobOption,
    batch,
    decorator,
    enqueue_batch,
    enqueue_job,
    enqueue_many,
    get_batch,
    operations,
    sql,
)
from django_pqjobs.models import Job
from django_pqjobs.registry import registry
from django_pqjobs.tasks.options import task_options
from django_pqjobs.testing import drain
from tests.helpers import ROOT, bound, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def finish(job_id: int, status: str = "done") -> None:
    Job.objects.filter(pk=job_id).update(status=status)


def test_unique_for_holds_the_key_for_its_window_whatever_the_status():
    first = enqueue_job("tests.noop", {"report": 7}, unique_for="1h")
    job = Job.objects.get(pk=first)
    assert job.dedupe_key is not None and job.dedupe_key.startswith("payload#")
    assert job.unique_states == 7  # done, failed and cancelled hold it too
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('hour', now()) + interval '1 hour'")
        (window_end,) = cursor.fetchone()
    assert job.unique_until == window_end
    for status in ("running", "done", "failed", "cancelled"):
        finish(first, status)
        assert enqueue_job("tests.noop", {"report": 7}, unique_for="1h") == first
    with pytest.raises(DuplicateJob) as raised:
        enqueue_job("tests.noop", {"report": 7}, unique_for="1h", dedupe="error")
    assert raised.value.existing_id == first
    # another payload is another key; without unique_for another window (none)
    assert enqueue_job("tests.noop", {"report": 8}, unique_for="1h") != first
    assert enqueue_job("tests.noop", {"report": 7}, dedupe_key=job.dedupe_key) != first


def test_the_next_window_takes_a_new_job():
    with connection.cursor() as cursor:  # start early in a one-second window, not at its end
        cursor.execute("SELECT 1 - extract(epoch FROM clock_timestamp())::numeric % 1")
        (rest,) = cursor.fetchone()
    if rest < 0.6:
        time.sleep(float(rest) + 0.02)
    first = enqueue_job("tests.noop", {"n": 1}, unique_for=1)
    assert enqueue_job("tests.noop", {"n": 1}, unique_for=1) == first
    until = Job.objects.get(pk=first).unique_until
    with connection.cursor() as cursor:
        cursor.execute("SELECT extract(epoch FROM %s - now())", [until])
        (left,) = cursor.fetchone()
    time.sleep(float(left) + 0.05)
    second = enqueue_job("tests.noop", {"n": 1}, unique_for=1)
    assert second != first
    assert Job.objects.get(pk=second).unique_until == until + timedelta(seconds=1)


def test_unique_states_hold_the_key_in_those_finished_statuses_only():
    kept = enqueue_job("tests.noop", dedupe_key="nightly", unique_states=["done"])
    finish(kept, "done")
    assert enqueue_job("tests.noop", dedupe_key="nightly", unique_states=["done"]) == kept
    # a failed job holds it only if its own states say so
    failed = enqueue_job("tests.noop", dedupe_key="sync", unique_states="done")
    finish(failed, "failed")
    again = enqueue_job("tests.noop", dedupe_key="sync", unique_states="done")
    assert again != failed


def test_unique_by_fields_and_payload_are_canonical():
    one = enqueue_job("tests.noop", {"account": 1, "x": 2}, unique_by=["account"])
    assert enqueue_job("tests.noop", {"x": 3, "account": 1}, unique_by=["account"]) == one
    assert enqueue_job("tests.noop", {"account": 2}, unique_by=["account"]) != one
    whole = enqueue_job("tests.noop", {"a": 1, "b": [1, 2]}, unique_by="payload")
    assert enqueue_job("tests.noop", {"b": [1, 2], "a": 1}, unique_by="payload") == whole
    assert enqueue_job("tests.noop", {"b": [2, 1], "a": 1}, unique_by="payload") != whole
    # a field left out is not a field that is null
    assert enqueue_job("tests.noop", {"x": 1}, unique_by=["account"]) != enqueue_job(
        "tests.noop", {"account": None}, unique_by=["account"]
    )
    with pytest.raises(InvalidJobOption, match="not a JSON object"):
        enqueue_job("tests.noop", [1, 2], unique_by=["account"])


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"unique_for": 0}, "unique_for"),
        ({"unique_for": "forever"}, "unique_for"),
        ({"unique_states": ["waiting"]}, "a waiting job has no key"),
        ({"unique_states": ["donee"]}, "choose from done, failed, cancelled"),
        ({"unique_states": 3}, "unique_states must be a status"),
        ({"unique_by": ""}, "unique_by must be 'payload' or a list"),
        ({"unique_by": ["a", "a"]}, "distinct field names"),
        ({"unique_by": ["account\x00"]}, "contains a NUL character"),
        ({"unique_by": ["\ud800"]}, "unique_by"),
        ({"unique_for": "1h", "depends_on": [1]}, "depends_on cannot have a dedupe_key"),
    ],
)
def test_bad_uniqueness_options_are_refused_with_their_name(given, error):
    with pytest.raises(InvalidJobOption, match=re.escape(error)):
        enqueue_job("tests.noop", {}, **given)
    assert not Job.objects.exists()


@pytest.mark.parametrize("status", ["running", "ready", "blocked", "waiting", "expired", None])
def test_a_status_that_is_not_finished_is_refused_in_unique_states_wherever_given(status):
    """unique_states names the finished statuses that go on holding a key: a live status
    there said nothing and was accepted silently (issue 40)."""
    error = (
        re.escape(f"unique_states: {status!r} is not a finished status")
        + ".*"
        + re.escape("choose from done, failed, cancelled")
    )
    with pytest.raises(InvalidJobOption, match=re.escape("@job('tests.live_states') ") + error):
        decorator.job("tests.live_states", unique_states=["done", status])
    with pytest.raises(InvalidJobOption, match=f"job type 'tests.noop' {error}"):
        enqueue_job("tests.noop", {}, unique_states=["done", status])
    with pytest.raises(InvalidJobOption, match=error):
        enqueue_many("tests.noop", [{}], unique_states=[status])
    with pytest.raises(InvalidJobOption, match=error):
        task_options(unique_states=[status])
    assert "tests.live_states" not in registry.names()
    assert not Job.objects.exists()


def test_replace_cancels_the_ready_holder_of_the_window_and_keeps_a_finished_one():
    ready = enqueue_job("tests.noop", {"k": 1}, unique_for="1h")
    newer = enqueue_job("tests.noop", {"k": 1}, unique_for="1h", dedupe="replace")
    assert newer != ready
    assert Job.objects.get(pk=ready).status == "cancelled"
    finish(newer, "done")
    assert enqueue_job("tests.noop", {"k": 1}, unique_for="1h", dedupe="replace") == newer


def test_enqueue_many_derives_a_key_per_payload_and_answers_duplicates():
    held = enqueue_job("tests.noop", {"n": 2}, unique_states=["done"])
    finish(held)
    ids = enqueue_many(
        "tests.noop", [{"n": 1}, {"n": 2}, {"n": 1}, {"n": 3}], unique_states=["done"]
    )
    assert ids[1] == held and ids[0] == ids[2]
    assert len({ids[0], ids[1], ids[3]}) == 3
    assert Job.objects.count() == 3
    with pytest.raises(DuplicateJob):
        enqueue_many("tests.noop", [{"n": 3}], unique_states=["done"], dedupe="error")


def test_every_path_puts_a_unique_for_job_in_the_same_window():
    """The window's end is computed by pqjobs_enqueue(), by enqueue_many's INSERT, by the
    lookup of a key's holder and by replace's cancel: a copy that drifted would let a
    duplicate in, or loop looking for a holder it cannot find."""
    ids = enqueue_many("tests.noop", [{"w": 1}, {"w": 2}], unique_for="1h")
    with connection.cursor() as cursor:
        cursor.execute("SELECT date_trunc('hour', now()) + interval '1 hour'")
        (window_end,) = cursor.fetchone()
    assert {Job.objects.get(pk=i).unique_until for i in ids} == {window_end}
    assert enqueue_job("tests.noop", {"w": 1}, unique_for="1h") == ids[0]  # the lookup
    assert enqueue_many("tests.noop", [{"w": 2}], unique_for="1h") == [ids[1]]
    newer = enqueue_job("tests.noop", {"w": 2}, unique_for="1h", dedupe="replace")
    assert Job.objects.get(pk=ids[1]).status == "cancelled"  # replace's cancel
    assert Job.objects.get(pk=newer).unique_until == window_end


def test_a_retry_of_a_job_that_holds_its_own_key_when_failed_goes_back():
    job_id = enqueue_job("tests.noop", dedupe_key="k", unique_states=["failed"])
    finish(job_id, "failed")
    assert enqueue_job("tests.noop", dedupe_key="k", unique_states=["failed"]) == job_id
    assert [r.job_id for r in operations.retry_jobs([job_id])] == [job_id]


def test_the_sql_function_takes_and_checks_the_uniqueness_arguments():
    call = (
        "SELECT pqjobs_enqueue('tests.noop', 'default', '{}'::jsonb, 0, 3, NULL, 0, NULL, "
        "%s, NULL, NULL, NULL, p_unique_for => %s, p_unique_states => %s::smallint)"
    )
    with connection.cursor() as cursor:
        cursor.execute(call, ["daily", 86400, 1])
        (first,) = cursor.fetchone()
        finish(first)
        cursor.execute(call, ["daily", 86400, 1])
        assert cursor.fetchone() == (None,)  # a duplicate: NULL, as for any dedupe key
    bad = [
        ([None, 3600, 0], "unique_for and unique_states need a dedupe_key"),
        (["k", 0, 0], "unique_for must be more than 0 seconds"),
        (["k", 3600, 8], "a mask from 0 to 7"),
    ]
    for params, message in bad:
        with (
            pytest.raises(Exception, match=message) as raised,
            transaction.atomic(),
            connection.cursor() as cursor,
        ):
            cursor.execute(call, params)
        assert raised.value.__cause__.sqlstate == "22023"


def test_every_copy_of_the_index_predicate_is_the_index_s():
    """ON CONFLICT and the lookups find the index by its predicate's text: each copy in the
    package is word for word the one of schema/uniqueness.sql, and the live index is what
    that file creates."""
    held = sql.held_by_key()
    package = ROOT / "django_pqjobs" / "sql"
    for name in (
        "schema/enqueue.sql",
        "queries/operator.sql",
        "migrations/0020_unique_jobs.up.sql",
    ):
        text = " ".join((package / name).read_text().split())
        assert " ".join(held.split()) in text, name
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_indexdef('pqjobs_job_unique_key'::regclass)")
        (live,) = cursor.fetchone()
        with transaction.atomic():
            cursor.execute("DROP INDEX pqjobs_job_unique_key")
            sql.run(cursor, "schema/uniqueness.sql")
            cursor.execute("SELECT pg_get_indexdef('pqjobs_job_unique_key'::regclass)")
            (from_file,) = cursor.fetchone()
            transaction.set_rollback(True)
    assert from_file == live


def test_the_job_page_says_when_the_key_is_held(admin_client):
    job_id = enqueue_job("tests.noop", {"r": 1}, unique_for="1h")
    page = admin_client.get(f"/admin/django_pqjobs/job/{job_id}/change/").content.decode()
    assert "Key held:" in page and "in every status, until" in page
    other = enqueue_job("tests.noop", dedupe_key="k2", unique_states=["failed"])
    page = admin_client.get(f"/admin/django_pqjobs/job/{other}/change/").content.decode()
    assert "while ready, blocked, running, failed" in page


# --- races: 8 enqueuers, a worker with 4 threads ---------------------------------------------

ENQUEUERS = 8
KEYS = 10


def storm(seconds: float, **options: object) -> list[Exception]:
    """8 threads enqueue the payloads {"k": 0..9} over and over for ``seconds``, each on
    its own connection; returns what they raised."""
    errors: list[Exception] = []
    stop = time.monotonic() + seconds

    def enqueuer(n: int) -> None:
        try:
            i = n
            while time.monotonic() < stop:
                enqueue_job("tests.noop", {"k": i % KEYS}, **options)
                i += 1
        except Exception as exc:  # pragma: no cover - what the test reports
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=enqueuer, args=(n,)) for n in range(ENQUEUERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(seconds + bound(30))
    return errors


@pytest.mark.parametrize(
    "options",
    [
        {"unique_states": ["done", "failed", "cancelled"]},  # by arguments, held for ever
        {"unique_by": ["k"], "unique_states": ["done"]},  # by chosen fields
        {"unique_for": 1},  # by period: one per key and one-second window
    ],
    ids=["arguments", "fields", "period"],
)
def test_eight_enqueuers_and_four_workers_make_one_job_per_key_and_window(options):
    with run_jobs("--concurrency", "4"):
        errors = storm(2.5, **options)
        wait_for(lambda: not Job.objects.exclude(status="done").exists())
    assert errors == []
    rows = list(Job.objects.values_list("dedupe_key", "unique_until", "status"))
    per_window = Counter((key, until) for key, until, _ in rows)
    assert set(per_window.values()) == {1}, per_window.most_common(3)
    keys = {key for key, _, _ in rows}
    assert len(keys) == KEYS
    if "unique_for" in options:
        assert len(per_window) >= 2 * KEYS  # the storm spanned windows
    else:
        assert len(rows) == KEYS
    assert {status for _, _, status in rows} == {"done"}


def test_a_plain_insert_with_on_conflict_do_nothing_respects_the_index():
    """What the enqueueing guide shows for a bare INSERT (no function): the unique index
    answers it too."""
    first = enqueue_job("tests.noop", dedupe_key="cleanup")
    params = connection.get_connection_params()
    with psycopg.connect(**params, autocommit=True) as other:
        inserted = other.execute(
            "INSERT INTO pqjobs_job (job_type, payload, dedupe_key) "
            "VALUES ('tests.noop', '{}', 'cleanup') ON CONFLICT DO NOTHING RETURNING id"
        ).fetchall()
    assert inserted == []
    assert list(Job.objects.values_list("pk", flat=True)) == [first]


# --- in batches ----------------------------------------------------------------------------


def test_a_duplicate_in_a_batch_is_no_member_and_the_batch_does_not_wait_for_it():
    outside = enqueue_job("tests.echo", {"n": 1}, unique_for="1h")
    with batch(on_finish="tests.noop") as opened:
        member = enqueue_job("tests.echo", {"n": 2}, unique_for="1h")
        assert enqueue_job("tests.echo", {"n": 1}, unique_for="1h") == outside
        assert enqueue_job("tests.echo", {"n": 2}, unique_for="1h") == member
    assert opened.job_ids == [member]
    counted = get_batch(opened.id)
    assert (counted.total, counted.pending) == (1, 1)
    assert Job.objects.get(pk=outside).batch_id is None
    ran = drain(queues=["default"])
    assert sorted(r.job_id for r in ran if r.job_type == "tests.echo") == sorted([outside, member])
    assert get_batch(opened.id).is_finished
    assert Job.objects.filter(callback_of_id=opened.id).count() == 1


def test_enqueue_batch_with_unique_for_counts_only_the_jobs_it_made():
    outside = enqueue_job("tests.echo", {"n": 1}, unique_for="1h")
    opened = enqueue_batch("tests.echo", [{"n": 1}, {"n": 2}, {"n": 2}], unique_for="1h")
    (member,) = opened.job_ids
    assert member != outside
    counted = get_batch(opened.id)
    assert (counted.total, counted.pending) == (1, 1)
    assert set(Job.objects.filter(batch_id=opened.id).values_list("pk", flat=True)) == {member}


def test_replace_in_a_batch_makes_the_new_job_the_member():
    outside = enqueue_job("tests.echo", {"v": 1}, dedupe_key="k", delay=60)
    with batch() as opened:
        new = enqueue_job("tests.echo", {"v": 2}, dedupe_key="k", dedupe="replace")
    assert new != outside and opened.job_ids == [new]
    assert Job.objects.get(pk=outside).status == "cancelled"
    assert get_batch(opened.id).total == 1
