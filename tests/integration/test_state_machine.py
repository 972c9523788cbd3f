"""Every transition of worker/queries.py against real PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction

from django_pqjobs import enqueue_job
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.worker import queries
from django_pqjobs.worker.queries import Claimed

pytestmark = pytest.mark.django_db(transaction=True)
DB = "default"


def seconds_between(a, b) -> float:
    return (a - b).total_seconds()


def test_claim_takes_highest_priority_then_oldest_and_marks_running():
    low = enqueue_job("t", {"n": 1}, priority=0)
    high = enqueue_job("t", {"n": 2}, priority=10)
    low2 = enqueue_job("t", {"n": 3}, priority=0)
    jobs = queries.claim(DB, "w1", None, 2)
    assert [j.id for j in jobs] == [high, low]
    assert jobs[0].payload == {"n": 2}
    row = Job.objects.get(pk=high)
    assert (row.status, row.attempts, row.locked_by) == ("running", 1, "w1")
    assert row.locked_at is not None and row.heartbeat_at is not None
    assert Job.objects.get(pk=low2).status == "ready"


def test_claim_respects_queues_and_run_after():
    enqueue_job("t", queue="emails")
    enqueue_job("t", queue="default", delay=3600)
    due = enqueue_job("t", queue="default")
    assert [j.id for j in queries.claim(DB, "w", ["default"], 10)] == [due]
    assert queries.claim(DB, "w", ["default"], 10) == []
    assert len(queries.claim(DB, "w", ["emails", "other"], 10)) == 1


def test_claim_with_zero_limit_claims_nothing():
    enqueue_job("t")
    assert queries.claim(DB, "w", None, 0) == []


def test_concurrent_claims_never_share_a_job():
    ids = {enqueue_job("t", {"i": i}) for i in range(200)}
    claimed: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def claimer(n: int) -> None:
        barrier.wait()
        try:
            while True:
                jobs = queries.claim(DB, f"w{n}", None, 3)
                if not jobs:
                    return
                with lock:
                    claimed.extend(j.id for j in jobs)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=claimer, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(claimed) == sorted(ids)
    assert len(claimed) == len(set(claimed))


def _claim_plan(tuned: bool, queues: bool = False) -> str:
    params: list = [["default"]] if queues else []
    with transaction.atomic(), connection.cursor() as cursor:
        # Make an ordered index scan look expensive, as stale statistics do (taken when the
        # table held few ready jobs): the planner then prefers to read every ready row.
        cursor.execute("SET LOCAL random_page_cost = 1000")
        if tuned:
            cursor.execute(queries.CLAIM_PLAN)
        cursor.execute("EXPLAIN " + queries.claim_sql(queues), [*params, 100, "w"])
        return "\n".join(r[0] for r in cursor.fetchall())


def test_claim_walks_the_claim_index_in_order_whatever_the_estimates():
    Job.objects.bulk_create(
        [Job(job_type="t", status="done", payload={}) for _ in range(2000)]
        + [Job(job_type="t", payload={}) for _ in range(3000)]
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pqjobs_job")
    untuned = _claim_plan(tuned=False)
    assert "Bitmap Heap Scan" in untuned or "Seq Scan" in untuned  # what CLAIM_PLAN prevents
    for queues in (False, True):
        plan = _claim_plan(tuned=True, queues=queues)
        assert "Index Scan using pqjobs_job_claim" in plan, plan
        assert "Bitmap" not in plan and "Seq Scan" not in plan, plan


def test_complete_stores_result_and_duration():
    job_id = enqueue_job("t")
    (job,) = queries.claim(DB, "w", None, 1)
    assert queries.complete(DB, Claimed.of(job), '{"ok": 1}', 42)
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.result, row.duration_ms) == ("done", {"ok": 1}, 42)
    assert row.finished_at is not None


def test_completion_is_fenced_on_worker_and_attempt():
    enqueue_job("t")
    (job,) = queries.claim(DB, "w", None, 1)
    stale = Claimed(job.id, "w", job.attempts)
    assert not queries.complete(DB, Claimed(job.id, "other", job.attempts), None, 1)
    assert not queries.complete(DB, Claimed(job.id, "w", job.attempts + 1), None, 1)
    # the job is rescued and claimed again: the first attempt's late outcome is refused
    Job.objects.filter(pk=job.id).update(heartbeat_at=job.locked_at - timedelta(hours=1))
    queries.rescue_stale(DB, 60)
    (again,) = queries.claim(DB, "w", None, 1)
    assert again.attempts == 2
    assert not queries.complete(DB, stale, None, 1)
    assert (
        queries.end_attempt(DB, stale, outcome="error", error_type="E", error="late", duration_ms=1)
        is None
    )
    assert Job.objects.get(pk=job.id).status == "running"


def test_retry_backs_off_and_records_every_failed_attempt_then_fails():
    job_id = enqueue_job("t", max_attempts=3)
    statuses = []
    for attempt in (1, 2, 3):
        Job.objects.filter(pk=job_id).update(run_after=Job.objects.get(pk=job_id).created_at)
        (job,) = queries.claim(DB, "w", None, 1)
        assert job.attempts == attempt
        status = queries.end_attempt(
            DB,
            Claimed.of(job),
            outcome="error",
            error_type="ValueError",
            error=f"Traceback...\nValueError: boom {attempt}",
            duration_ms=5,
            delay=120,
        )
        statuses.append(status)
        row = Job.objects.get(pk=job_id)
        if status == "ready":
            now = queries.database_now(DB)
            assert 110 < seconds_between(row.run_after, now) <= 120
            assert row.finished_at is None
    assert statuses == ["ready", "ready", "failed"]
    row = Job.objects.get(pk=job_id)
    assert row.finished_at is not None and row.error_type == "ValueError"
    assert row.last_error.endswith("boom 3")
    history = list(JobAttempt.objects.filter(job_id=job_id).values_list("attempt", "traceback"))
    assert [a for a, _ in history] == [1, 2, 3]
    assert [t.splitlines()[-1] for _, t in history] == [f"ValueError: boom {n}" for n in (1, 2, 3)]
    assert all(a.started_at and a.worker_id == "w" for a in JobAttempt.objects.all())


def test_permanent_failure_and_cancel_are_final_at_once():
    a = enqueue_job("t", max_attempts=5)
    b = enqueue_job("t", max_attempts=5)
    ja, jb = queries.claim(DB, "w", None, 2)
    assert (
        queries.end_attempt(
            DB,
            Claimed.of(ja),
            outcome="permanent",
            error_type="E",
            error="no",
            duration_ms=1,
            final="failed",
        )
        == "failed"
    )
    assert (
        queries.end_attempt(
            DB,
            Claimed.of(jb),
            outcome="cancelled",
            error_type="C",
            error="stop",
            duration_ms=1,
            final="cancelled",
        )
        == "cancelled"
    )
    assert {Job.objects.get(pk=a).status, Job.objects.get(pk=b).status} == {"failed", "cancelled"}
    with pytest.raises(ValueError, match="final"):
        queries.end_attempt(
            DB, Claimed.of(ja), outcome="x", error_type="", error="", duration_ms=1, final="done"
        )


def test_error_text_is_capped_at_10_kb_keeping_the_end():
    enqueue_job("t")
    (job,) = queries.claim(DB, "w", None, 1)
    huge = "x" * 50_000 + "\nValueError: the real cause"
    queries.end_attempt(
        DB, Claimed.of(job), outcome="error", error_type="ValueError", error=huge, duration_ms=1
    )
    row = Job.objects.get(pk=job.id)
    assert len(row.last_error) <= 10 * 1024
    assert row.last_error.endswith("ValueError: the real cause")
    assert "characters cut" in row.last_error
    assert len(JobAttempt.objects.get(job_id=job.id).traceback) <= 10 * 1024


def test_release_gives_the_attempt_back():
    job_id = enqueue_job("t")
    (job,) = queries.claim(DB, "w", None, 1)
    assert queries.release(DB, [Claimed.of(job)]) == [job_id]
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.attempts) == ("ready", 0)
    assert JobAttempt.objects.get(job_id=job_id).outcome == "released"
    assert queries.release(DB, []) == []


def test_rescue_returns_stale_jobs_and_fails_exhausted_ones():
    fresh = enqueue_job("t")
    stale = enqueue_job("t", max_attempts=3)
    exhausted = enqueue_job("t", max_attempts=1)
    queries.claim(DB, "dead-worker", None, 3)
    Job.objects.filter(pk__in=[stale, exhausted]).update(
        heartbeat_at=queries.database_now(DB) - timedelta(minutes=30)
    )
    rescued = queries.rescue_stale(DB, 1200)
    assert {(r.job_id, r.status) for r in rescued} == {(stale, "ready"), (exhausted, "failed")}
    assert Job.objects.get(pk=fresh).status == "running"
    lost = JobAttempt.objects.get(job_id=stale)
    assert lost.outcome == "lost" and "dead-worker" in lost.traceback
    assert Job.objects.get(pk=stale).error_type == "WorkerLost"


def test_rescue_honours_per_job_timeout():
    job_id = enqueue_job("t", timeout=5)
    queries.claim(DB, "w", None, 1)
    # the heartbeat is fresh but the job has run far past timeout + stale timeout
    Job.objects.filter(pk=job_id).update(
        locked_at=queries.database_now(DB) - timedelta(seconds=100)
    )
    assert [r.job_id for r in queries.rescue_stale(DB, 60)] == [job_id]


def test_only_one_rescuer_at_a_time():
    from django.db import transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [queries.REAPER_LOCK_KEY])
        result: list = []
        t = threading.Thread(
            target=lambda: (result.append(queries.rescue_stale(DB, 60)), connections.close_all())
        )
        t.start()
        t.join(10)
    assert result == [None]


def test_cancel_and_requeue():
    claimed_first = enqueue_job("t")
    other = enqueue_job("t")
    (job,) = queries.claim(DB, "w", None, 1)
    assert job.id == claimed_first  # same priority: the older job first
    first_running = Job.objects.running().get()
    assert queries.cancel(DB, other) == "cancelled"
    assert queries.cancel(DB, first_running.pk) == "cancel_requested"
    assert Job.objects.get(pk=first_running.pk).cancel_requested_at is not None
    assert queries.cancel(DB, other) is None
    assert queries.cancel(DB, 999_999_999) is None
    assert queries.requeue(DB, other)
    row = Job.objects.get(pk=other)
    assert (row.status, row.attempts, row.finished_at) == ("ready", 0, None)
    assert not queries.requeue(DB, first_running.pk)


def test_heartbeat_reports_lost_jobs_and_cancel_requests():
    a, b = enqueue_job("t"), enqueue_job("t")
    ja, jb = queries.claim(DB, "w", None, 2)
    queries.cancel(DB, jb.id)
    Job.objects.filter(pk=ja.id).update(locked_by="someone-else")
    result = queries.heartbeat(
        DB, "w", [Claimed.of(ja), Claimed.of(jb)], hostname="h", pid=1, queues=None, concurrency=2
    )
    assert result.alive == {jb.id}
    assert result.cancel_requested == {jb.id}
    from django_pqjobs.models import WorkerRecord

    assert WorkerRecord.objects.get(pk="w").concurrency == 2
    assert {a, b} == {ja.id, jb.id}


def test_prune_deletes_old_finished_jobs_with_their_history():
    old_done, old_failed, new_done, ready = (enqueue_job("t") for _ in range(4))
    Job.objects.filter(pk__in=[old_done, new_done]).update(status="done")
    Job.objects.filter(pk=old_failed).update(status="failed")
    JobAttempt.objects.create(job_id=old_failed, attempt=1, outcome="error")
    now = queries.database_now(DB)
    Job.objects.filter(pk__in=[old_done, old_failed]).update(finished_at=now - timedelta(days=40))
    Job.objects.filter(pk=new_done).update(finished_at=now)
    deleted = queries.prune(DB, {"done": 86400, "failed": 86400, "cancelled": None}, batch=1)
    assert deleted == {"done": 1, "failed": 1, "cancelled": 0}
    assert set(Job.objects.values_list("pk", flat=True)) == {new_done, ready}
    assert not JobAttempt.objects.exists()


def test_claimed_job_carries_every_field_as_stored():
    parent = enqueue_job("t")
    job_id = enqueue_job(
        "t",
        {"order": 7, "items": [1, 2]},
        priority=3,
        timeout=12.5,
        dedupe_key="k-1",
        max_attempts=4,
    )
    Job.objects.filter(pk=parent).update(status="done")
    Job.objects.filter(pk=job_id).update(
        parent_id=parent, last_error="earlier failure", error_type="ValueError", duration_ms=17
    )
    (claimed,) = queries.claim(DB, "w", None, 1)
    stored = Job.objects.get(pk=job_id)
    assert claimed.get_deferred_fields() == set()
    assert not claimed._state.adding and claimed._state.db == DB
    for field in Job._meta.concrete_fields:
        assert getattr(claimed, field.attname) == getattr(stored, field.attname), field.name
    assert claimed.status == "running" and claimed.locked_by == "w" and claimed.attempts == 1


def _table_stats() -> tuple[int, object]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_dead_tup, last_vacuum FROM pg_stat_user_tables WHERE relname = 'pqjobs_job'"
        )
        dead, last_vacuum = cursor.fetchone()
    return int(dead), last_vacuum


def test_job_tables_are_vacuumed_when_autovacuum_is_off_for_them():
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pqjobs_job SET (autovacuum_enabled = false)")
    try:
        Job.objects.bulk_create([Job(job_type="t", payload={}) for _ in range(12_000)])
        assert not queries.vacuum_if_needed(DB)  # live rows only: nothing to reclaim
        Job.objects.all().delete()
        assert _table_stats()[0] >= 12_000
        assert queries.vacuum_if_needed(DB)
        dead, last_vacuum = _table_stats()
        assert dead == 0 and last_vacuum is not None
        assert not queries.vacuum_if_needed(DB)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pqjobs_job RESET (autovacuum_enabled)")
