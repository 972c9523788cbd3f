"""Enqueueing against real PostgreSQL: transactions, dedupe under concurrency, bulk, NOTIFY."""

from __future__ import annotations

import itertools
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, connections, transaction
from django.test import override_settings
from django.utils import timezone

from django_pqjobs import (
    DuplicateJob,
    PayloadError,
    enqueue_job,
    enqueue_many,
    enqueue_on_commit,
    signals,
)
from django_pqjobs.models import Job
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import bound

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_returns_the_id_and_stores_every_option():
    run_at = timezone.now() + timedelta(hours=1)
    job_id = enqueue_job(
        "t",
        {"a": 1},
        queue="q",
        priority=3,
        run_after=run_at,
        max_attempts=2,
        timeout=timedelta(seconds=9),
        dedupe_key="k",
    )
    job = Job.objects.get(pk=job_id)
    assert (job.job_type, job.payload, job.queue, job.priority, job.max_attempts) == (
        "t",
        {"a": 1},
        "q",
        3,
        2,
    )
    assert (job.timeout_seconds, job.dedupe_key, job.status, job.attempts) == (9, "k", "ready", 0)
    assert abs((job.run_after - run_at).total_seconds()) < 0.001


def test_delay_is_computed_on_the_database_clock():
    job_id = enqueue_job("t", delay=90)
    job = Job.objects.get(pk=job_id)
    assert 89.9 < (job.run_after - job.created_at).total_seconds() < 90.1


def test_rolled_back_transaction_leaves_no_job():
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_job("t", {"n": 1})
        raise RuntimeError("business error")
    assert not Job.objects.exists()


def test_enqueue_on_commit_waits_for_the_commit():
    with transaction.atomic():
        enqueue_on_commit("t", {"n": 1})
        assert not Job.objects.exists()
    assert Job.objects.get().payload == {"n": 1}
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_on_commit("t", {"n": 2})
        raise RuntimeError
    assert Job.objects.count() == 1


def test_enqueue_on_commit_validates_the_payload_immediately():
    with transaction.atomic(), pytest.raises(PayloadError, match="'t'"):
        enqueue_on_commit("t", {"bad": object()})
    assert not Job.objects.exists()


def test_bad_payload_loses_nothing_in_the_surrounding_transaction():
    from shop.models import Order

    with transaction.atomic():
        Order.objects.create(email="a@b.c", total=1)
        with pytest.raises(PayloadError):
            enqueue_job("t", {"bad": {1, 2}})
        enqueue_job("t", {"good": True})  # the transaction is still usable
    assert Order.objects.count() == 1
    assert Job.objects.get().payload == {"good": True}


def test_oversized_payload_is_refused():
    with (
        override_settings(PQJOBS={"PAYLOAD_MAX_BYTES": 1000}),
        pytest.raises(PayloadError, match="over the limit"),
    ):
        enqueue_job("tests.echo", {"x": "y" * 2000})
    assert not Job.objects.exists()


def _hammer(n: int, fn) -> list:
    results: list = []
    errors: list = []
    barrier = threading.Barrier(n)

    def run() -> None:
        try:
            barrier.wait()
            results.append(fn())
        except Exception as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(bound(60))
    return [results, errors]


def test_fifty_threads_skip_dedupe_to_one_active_job():
    results, errors = _hammer(50, lambda: enqueue_job("t", dedupe_key="same", dedupe="skip"))
    assert not errors
    assert len(set(results)) == 1
    assert Job.objects.active().count() == 1 and Job.objects.count() == 1


def test_fifty_threads_error_dedupe_one_wins_others_get_duplicate_job():
    results, errors = _hammer(50, lambda: enqueue_job("t", dedupe_key="same", dedupe="error"))
    assert len(results) == 1
    assert len(errors) == 49 and all(isinstance(e, DuplicateJob) for e in errors)
    assert {e.existing_id for e in errors} == set(results)
    assert "already has an active job" in str(errors[0])


def test_fifty_threads_replace_dedupe_leave_one_active_job():
    results, errors = _hammer(
        50,
        lambda: enqueue_job("t", {"v": threading.get_ident()}, dedupe_key="same", dedupe="replace"),
    )
    assert not errors
    assert Job.objects.active().count() == 1
    assert Job.objects.filter(status="cancelled").count() == Job.objects.count() - 1
    active = Job.objects.active().get()
    assert active.pk in results


def test_replace_cancels_a_ready_job_but_never_a_running_one():
    first = enqueue_job("t", {"v": 1}, dedupe_key="k")
    second = enqueue_job("t", {"v": 2}, dedupe_key="k", dedupe="replace")
    assert second != first
    assert Job.objects.get(pk=first).status == "cancelled"
    assert "replaced" in Job.objects.get(pk=first).last_error
    claim_jobs("default", "w", None, 1)
    third = enqueue_job("t", {"v": 3}, dedupe_key="k", dedupe="replace")
    assert third == second
    assert Job.objects.get(pk=second).status == "running"


def test_dedupe_key_is_free_again_once_the_job_finished():
    first = enqueue_job("t", dedupe_key="k")
    Job.objects.filter(pk=first).update(status="done")
    second = enqueue_job("t", dedupe_key="k")
    assert second != first
    assert enqueue_job("tests.noop", dedupe_key="k") not in (first, second)


def test_dedupe_per_job_type_default(settings):
    from tests.testapp.jobs import noop  # noqa: F401 - registered types

    settings.PQJOBS = {**settings.PQJOBS, "DEDUPE": "error"}
    enqueue_job("t", dedupe_key="k")
    with pytest.raises(DuplicateJob):
        enqueue_job("t", dedupe_key="k")


def test_enqueue_many_inserts_in_order_and_skips_duplicates():
    existing = enqueue_job("t", dedupe_key="b")
    ids = enqueue_many(
        "t", [{"i": 0}, {"i": 1}, {"i": 2}, {"i": 3}], dedupe_keys=[None, "b", "c", "c"], priority=4
    )
    assert ids[1] == existing and ids[2] == ids[3]
    assert len(set(ids)) == 3
    assert Job.objects.get(pk=ids[0]).payload == {"i": 0}
    assert Job.objects.get(pk=ids[2]).payload == {"i": 2}
    assert Job.objects.count() == 3
    assert set(Job.objects.values_list("priority", flat=True)) == {0, 4}
    assert enqueue_many("t", []) == []


def test_enqueue_many_keeps_payload_order_without_keys():
    ids = enqueue_many("t", [{"i": i} for i in range(500)])
    payloads = dict(Job.objects.values_list("pk", "payload"))
    assert [payloads[i]["i"] for i in ids] == list(range(500))


def test_enqueue_many_refuses_bad_input_before_inserting_anything():
    with pytest.raises(PayloadError, match="'t'"):
        enqueue_many("t", [{"ok": 1}, {"bad": object()}])
    from django_pqjobs import InvalidJobOption

    with pytest.raises(InvalidJobOption, match="dedupe_keys"):
        enqueue_many("t", [{}, {}], dedupe_keys=["a"])
    assert not Job.objects.exists()


def test_enqueue_many_skip_returns_the_active_jobs_ids():
    existing = enqueue_job("t", {"old": True}, dedupe_key="b")
    ids = enqueue_many("t", [{"i": 0}, {"i": 1}], dedupe_keys=["a", "b"], dedupe="skip")
    assert ids[1] == existing
    assert Job.objects.get(pk=existing).payload == {"old": True}
    assert Job.objects.count() == 2


def test_enqueue_many_error_names_every_duplicate_and_enqueues_nothing():
    from shop.models import Order

    b = enqueue_job("t", dedupe_key="b")
    d = enqueue_job("t", dedupe_key="d")
    with transaction.atomic():
        Order.objects.create(email="a@b.c", total=1)
        with pytest.raises(DuplicateJob) as caught:
            enqueue_many("t", [{}] * 4, dedupe_keys=["a", "b", "c", "d"], dedupe="error")
        enqueue_job("t", dedupe_key="e")  # the surrounding transaction is still usable
    assert caught.value.duplicates == {"b": b, "d": d}
    assert (caught.value.dedupe_key, caught.value.existing_id) == ("b", b)
    assert f"'b' (job {b})" in str(caught.value) and f"'d' (job {d})" in str(caught.value)
    assert sorted(Job.objects.values_list("dedupe_key", flat=True)) == ["b", "d", "e"]
    assert Order.objects.count() == 1


def test_enqueue_many_error_without_duplicates_inserts_everything():
    ids = enqueue_many("t", [{}] * 3, dedupe_keys=["a", None, "c"], dedupe="error")
    assert len(set(ids)) == 3 and Job.objects.count() == 3


def test_enqueue_many_replace_replaces_ready_jobs_but_never_a_running_one():
    ready = enqueue_job("t", {"v": "old"}, dedupe_key="b")
    running = enqueue_job("t", {"v": "old"}, dedupe_key="c")
    Job.objects.filter(pk=running).update(status="running", locked_by="w", attempts=1)
    ids = enqueue_many(
        "t", [{"v": "a"}, {"v": "b"}, {"v": "c"}], dedupe_keys=["a", "b", "c"], dedupe="replace"
    )
    assert ids[2] == running and ids[1] != ready
    replaced = Job.objects.get(pk=ready)
    assert replaced.status == "cancelled" and "replaced" in replaced.last_error
    assert Job.objects.get(pk=ids[1]).payload == {"v": "b"}
    assert Job.objects.get(pk=running).status == "running"
    assert Job.objects.get(pk=running).payload == {"v": "old"}
    assert Job.objects.active().count() == 3


def test_enqueue_many_follows_the_job_types_strategy_then_the_setting(settings):
    old = enqueue_job("tests.replaceable", dedupe_key="k")
    (new,) = enqueue_many("tests.replaceable", [{}], dedupe_keys=["k"])  # @job(dedupe="replace")
    assert new != old and Job.objects.get(pk=old).status == "cancelled"
    (same,) = enqueue_many("tests.replaceable", [{}], dedupe_keys=["k"], dedupe="skip")
    assert same == new
    settings.PQJOBS = {**settings.PQJOBS, "DEDUPE": "error"}
    enqueue_job("t", dedupe_key="k")
    with pytest.raises(DuplicateJob, match="'k'"):
        enqueue_many("t", [{}], dedupe_keys=["k"])


@pytest.mark.parametrize("strategy", ["replace", "error"])
def test_enqueue_many_refuses_a_key_given_twice_when_it_cannot_skip(strategy):
    from django_pqjobs import InvalidJobOption

    with pytest.raises(InvalidJobOption, match=r"dedupe_keys\[0\] and dedupe_keys\[2\] .*'a'"):
        enqueue_many("t", [{}] * 3, dedupe_keys=["a", "b", "a"], dedupe=strategy)
    assert not Job.objects.exists()


def test_enqueue_many_recovers_when_a_duplicate_finishes_before_it_is_looked_up():
    """A key whose active job ends between the INSERT and the lookup is inserted again."""
    existing = enqueue_job("t", dedupe_key="k")
    with connection.cursor() as cursor:
        # Ends the duplicate right after the bulk INSERT skipped it (the first statement
        # after it reads the active jobs; this trigger runs at the end of the INSERT).
        cursor.execute(
            f"""
            CREATE FUNCTION pqjobs_test_finish() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN
                UPDATE pqjobs_job SET status = 'done' WHERE id = {existing};
                RETURN NULL;
            END $$;
            CREATE TRIGGER pqjobs_test_finish AFTER INSERT ON pqjobs_job
            FOR EACH STATEMENT EXECUTE FUNCTION pqjobs_test_finish();
            """
        )
    try:
        for strategy in ("skip", "error", "replace"):
            Job.objects.exclude(pk=existing).delete()
            Job.objects.filter(pk=existing).update(status="running")  # replace keeps it too
            (job_id,) = enqueue_many("t", [{}], dedupe_keys=["k"], dedupe=strategy)
            assert job_id != existing, strategy
            assert Job.objects.get(pk=job_id).status == "ready"
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "DROP TRIGGER pqjobs_test_finish ON pqjobs_job; DROP FUNCTION pqjobs_test_finish()"
            )


def test_concurrent_bulk_and_single_replaces_leave_one_active_job_per_key():
    keys = [f"k{n}" for n in range(40)]

    def bulk() -> list[int]:
        return enqueue_many("t", [{}] * len(keys), dedupe_keys=keys, dedupe="replace")

    def single() -> int:
        return enqueue_job("t", dedupe_key="k7", dedupe="replace")

    turns = itertools.count()  # two bulk replaces for each single one
    results, errors = _hammer(12, lambda: bulk() if next(turns) % 3 else single())
    assert not errors
    active = dict(Job.objects.active().values_list("dedupe_key", "pk"))
    assert sorted(active) == sorted(keys)
    returned = {job_id for r in results for job_id in (r if isinstance(r, list) else [r])}
    assert set(active.values()) <= returned
    assert Job.objects.filter(status="cancelled").count() == Job.objects.count() - len(keys)


def test_enqueue_sends_notify_on_commit(listener):
    with transaction.atomic():
        enqueue_job("t", queue="emails")
        assert list(listener.notifies(timeout=0.2)) == []
    notes = list(listener.notifies(timeout=2, stop_after=1))
    assert [n.payload for n in notes] == ["emails"]


def test_enqueue_job_is_one_round_trip_notify_included(listener, django_assert_num_queries):
    with django_assert_num_queries(1):
        job_id = enqueue_job("t", {"n": 1}, queue="emails")
    notes = list(listener.notifies(timeout=2, stop_after=1))
    assert [n.payload for n in notes] == ["emails"]
    assert Job.objects.get(pk=job_id).status == "ready"


@override_settings(PQJOBS={"LISTEN_NOTIFY": False})
def test_no_notify_when_listen_notify_is_off(listener):
    enqueue_job("t", queue="emails")
    assert list(listener.notifies(timeout=0.3)) == []
    assert Job.objects.filter(queue="emails").count() == 1


def test_no_notify_while_no_worker_listens(listener):
    """A NOTIFY locks the database for every notifying commit: none is sent while every
    worker claims on its own (none says it listens), e.g. under a stream of jobs."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pqjobs_worker SET listening = false")
    enqueue_job("t", queue="emails")
    enqueue_many("t", [{}, {}], queue="emails")
    assert list(listener.notifies(timeout=0.3)) == []
    with connection.cursor() as cursor:
        cursor.execute("UPDATE pqjobs_worker SET listening = true")
    enqueue_job("t", queue="emails")
    assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["emails"]


def test_a_dedupe_conflict_sends_no_notify(listener):
    first = enqueue_job("t", dedupe_key="k", queue="emails")
    assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["emails"]
    assert enqueue_job("t", dedupe_key="k", queue="emails") == first
    assert list(listener.notifies(timeout=0.3)) == []


def test_enqueue_works_with_server_side_binding_cursors():
    # DATABASES OPTIONS {"server_side_binding": True}: parameters travel typed (a Python int
    # as int2/int4/int8 by value) instead of being merged into the SQL as literals.
    from django.db.backends.postgresql.base import ServerBindingCursor

    connection.ensure_connection()
    raw = connection.connection
    previous = raw.cursor_factory
    raw.cursor_factory = ServerBindingCursor
    try:
        run_at = timezone.now() + timedelta(minutes=5)
        job_id = enqueue_job(
            "t",
            {"big": 2**40},
            queue="q",
            priority=-7,
            run_after=run_at,
            max_attempts=3,
            timeout=1.5,
            dedupe_key="sb",
        )
        again = enqueue_job("t", dedupe_key="sb")
    finally:
        raw.cursor_factory = previous
    job = Job.objects.get(pk=job_id)
    assert again == job_id
    assert (job.payload, job.priority, job.max_attempts, job.timeout_seconds) == (
        {"big": 2**40},
        -7,
        3,
        1.5,
    )
    assert abs((job.run_after - run_at).total_seconds()) < 0.001


def test_enqueue_function_migration_reverses_and_reapplies():
    def function_exists() -> bool:
        with connection.cursor() as cursor:
            cursor.execute("SELECT EXISTS (SELECT FROM pg_proc WHERE proname = 'pqjobs_enqueue')")
            return bool(cursor.fetchone()[0])

    assert function_exists()
    try:
        call_command("migrate", "django_pqjobs", "0006", verbosity=0)
        assert not function_exists()
    finally:
        call_command("migrate", "django_pqjobs", verbosity=0)
    assert function_exists()
    assert Job.objects.get(pk=enqueue_job("t")).status == "ready"


def test_job_enqueued_signal():
    seen = []

    def receiver(sender, job_id, job_type, created, **kwargs):
        seen.append((sender, job_id, created))

    signals.job_enqueued.connect(receiver)
    try:
        first = enqueue_job("t", dedupe_key="k")
        enqueue_job("t", dedupe_key="k")
    finally:
        signals.job_enqueued.disconnect(receiver)
    assert seen == [("t", first, True), ("t", first, False)]
