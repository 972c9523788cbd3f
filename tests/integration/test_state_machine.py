"""Every transition of transitions/ (the state machine) against real PostgreSQL."""

from __future__ import annotations

import re
import threading
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, connections

from django_pqjobs import Priority, enqueue_job, transitions
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.transitions import Completion, Fence
from django_pqjobs.worker import housekeeping
from django_pqjobs.worker.claiming import claim_jobs
from django_pqjobs.worker.heartbeats import WorkerIdentity, heartbeat

from ..helpers import bound, plan_of, planned_inside

pytestmark = pytest.mark.django_db(transaction=True)
DB = "default"


def seconds_between(a, b) -> float:
    return (a - b).total_seconds()


def test_claim_takes_highest_priority_then_oldest_and_marks_running():
    low = enqueue_job("t", {"n": 1}, priority=0)
    high = enqueue_job("t", {"n": 2}, priority=10)
    low2 = enqueue_job("t", {"n": 3}, priority=0)
    jobs = claim_jobs(DB, "w1", None, 2).jobs
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
    assert [j.id for j in claim_jobs(DB, "w", ["default"], 10).jobs] == [due]
    assert claim_jobs(DB, "w", ["default"], 10).jobs == []
    assert len(claim_jobs(DB, "w", ["emails", "other"], 10).jobs) == 1


def test_claim_with_zero_limit_claims_nothing():
    enqueue_job("t")
    assert claim_jobs(DB, "w", None, 0).jobs == []


def test_concurrent_claims_never_share_a_job():
    ids = {enqueue_job("t", {"i": i}) for i in range(200)}
    claimed: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def claimer(n: int) -> None:
        barrier.wait()
        try:
            while True:
                jobs = claim_jobs(DB, f"w{n}", None, 3).jobs
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
        t.join(bound(30))
    assert sorted(claimed) == sorted(ids)
    assert len(claimed) == len(set(claimed))


PICK = "FOR UPDATE SKIP LOCKED"
CLAIM_BY_TID = "locked_by = p_worker"  # the usual claim's UPDATE (by TID)
COMPLETE_BY_TID = "j.ctid = ANY(tids)"


def _a_table_the_statistics_call_empty() -> None:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pqjobs_job")  # empty: what a new project's statistics say
    Job.objects.bulk_create(
        [Job(job_type="t", status="done", payload={}) for _ in range(2000)]
        + [Job(job_type="t", payload={}, priority=n % 100) for n in range(3000)]
    )


def scan_of(plan: str, cte: str) -> str:
    """The part of a plan that computes the CTE ``cte`` (its lines, indented under it)."""
    lines = plan.splitlines()
    start = next(n for n, line in enumerate(lines) if line.strip() == f"CTE {cte}")
    depth = len(lines[start]) - len(lines[start].lstrip())
    part = [lines[start]]
    for line in lines[start + 1 :]:
        if len(line) - len(line.lstrip()) <= depth:
            break
        part.append(line)
    return "\n".join(part)


def assert_walks_in_claim_order(pick: str) -> None:
    """Both lines of the claim (by age, and fair turns) read their index in order and stop
    at the limit: no sort and no other scan of the table's rows (only the few rows picked
    are put in order, in memory)."""
    for cte, index in (("by_age", "pqjobs_job_claim"), ("fair", "pqjobs_job_fair_claim")):
        scan = scan_of(pick, cte)
        assert f"Index Scan using {index}" in scan, scan
        assert "Limit" in scan and "Sort" not in scan, scan
    assert not any(word in pick for word in ("Seq Scan", "Bitmap")), pick


@pytest.mark.parametrize("queues", [None, ["default"]])
def test_claim_plans_hold_whatever_the_statistics(queues):
    """pqjobs_claim() plans its statements once per session: they must be the right plans
    whatever the statistics said then (here: an empty table that has since filled, and index
    scans made to look expensive): the claim index read in order, and the claimed rows
    updated where they lie."""
    _a_table_the_statistics_call_empty()

    def claim() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SET random_page_cost = 1000")
        assert len(claim_jobs(DB, "w", queues, 10).jobs) == 10

    plans = planned_inside(claim)
    pick = plan_of(plans, PICK)
    assert_walks_in_claim_order(pick)
    update = plan_of(plans, CLAIM_BY_TID)
    assert "Tid Scan" in update and "Index" not in update, update


def test_claim_with_a_priority_floor_takes_only_jobs_at_or_above_it():
    low = enqueue_job("t", priority=Priority.LOW)
    normal = enqueue_job("t")
    high = enqueue_job("t", priority=Priority.HIGH)
    above = enqueue_job("t", priority=60)
    critical = enqueue_job("t", priority="critical")
    claimed = [j.id for j in claim_jobs(DB, "w", None, 10, Priority.HIGH).jobs]
    assert claimed == [critical, above, high]
    assert claim_jobs(DB, "w", ["default"], 10, Priority.HIGH).jobs == []
    assert [j.id for j in claim_jobs(DB, "w", ["default"], 10, Priority.LOW).jobs] == [
        normal,
        low,
    ]


@pytest.mark.slow
def test_the_priority_floor_is_served_by_the_claim_index():
    """The floor bounds the scan of pqjobs_job_claim: it reads only the ready jobs at or
    above it, in order, however many lower ones wait."""
    _a_table_the_statistics_call_empty()
    plans = planned_inside(lambda: claim_jobs(DB, "w", ["default"], 10, 90))
    pick = plan_of(plans, PICK)
    # The floor is an index condition (where the scan starts and stops), not a filter over
    # rows already read, and the rows come in claim order (no sort).
    assert_walks_in_claim_order(pick)
    for cte in ("by_age", "fair"):
        # (by age: after "fair_turn IS NULL", the index's first column, a constant here)
        assert re.search(
            r"Index Cond: \(+(\(fair_turn IS NULL\) = true\) AND \()?priority >= ",
            scan_of(pick, cte),
        ), pick


@pytest.mark.slow
def test_completion_plans_hold_whatever_the_statistics():
    _a_table_the_statistics_call_empty()

    def claim_and_complete() -> None:
        batch = claim_jobs(DB, "w", None, 10)
        fences = [Fence.of(job, batch.tids[job.id]) for job in batch.jobs]
        done = transitions.complete_many(DB, [Completion(f, None, 1) for f in fences])
        assert done == {f.job_id for f in fences}

    update = plan_of(planned_inside(claim_and_complete), COMPLETE_BY_TID)
    assert "Tid Scan" in update and "Index" not in update, update


def test_a_completion_finds_its_row_where_the_claim_left_it_or_by_id():
    ids = [enqueue_job("t") for _ in range(4)]
    batch = claim_jobs(DB, "w", None, 4)
    fences = [Fence.of(job, batch.tids[job.id]) for job in batch.jobs]
    assert [f.job_id for f in fences] == ids and all(f.tid for f in fences)
    # The second row moved since its claim (a heartbeat wrote a new version of it); the
    # third was rescued and claimed again elsewhere (its verdict is fenced off); the fourth
    # comes with the place of another job's row.
    Job.objects.filter(pk=ids[1]).update(heartbeat_at=database_now(DB))
    Job.objects.filter(pk=ids[2]).update(attempts=5)
    elsewhere = Fence(ids[3], "w", fences[3].attempt, tid=fences[0].tid)
    done = transitions.complete_many(
        DB, [Completion(f, '{"n": 1}', 3) for f in (fences[1], fences[2], elsewhere)]
    )
    assert done == {ids[1], ids[3]}
    assert dict(Job.objects.values_list("pk", "status")) == {
        ids[0]: "running",  # its place was named, but with another job's fence
        ids[1]: "done",
        ids[2]: "running",
        ids[3]: "done",
    }
    assert Job.objects.get(pk=ids[1]).result == {"n": 1}
    # and without a place at all (an atomic job's completion): by id
    only = transitions.complete_many(DB, [Completion(Fence.of(batch.jobs[0]), None, 1)])
    assert only == {ids[0]}


def test_complete_stores_result_and_duration():
    job_id = enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    assert transitions.complete(DB, Completion(Fence.of(job), '{"ok": 1}', 42))
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.result, row.duration_ms) == ("done", {"ok": 1}, 42)
    assert row.finished_at is not None


def test_completion_is_fenced_on_worker_and_attempt():
    enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    stale = Fence(job.id, "w", job.attempts)
    assert not transitions.complete(DB, Completion(Fence(job.id, "other", job.attempts), None, 1))
    assert not transitions.complete(DB, Completion(Fence(job.id, "w", job.attempts + 1), None, 1))
    # the job is rescued and claimed again: the first attempt's late verdict is refused
    Job.objects.filter(pk=job.id).update(heartbeat_at=job.locked_at - timedelta(hours=1))
    transitions.rescue_stale(DB, 60)
    (again,) = claim_jobs(DB, "w", None, 1).jobs
    assert again.attempts == 2
    assert not transitions.complete(DB, Completion(stale, None, 1))
    assert (
        transitions.end_attempt(
            DB, stale, failure="error", error_type="E", error="late", duration_ms=1
        )
        is None
    )
    assert Job.objects.get(pk=job.id).status == "running"


def test_retry_backs_off_and_records_every_failed_attempt_then_fails():
    job_id = enqueue_job("t", max_attempts=3)
    statuses = []
    for attempt in (1, 2, 3):
        Job.objects.filter(pk=job_id).update(run_after=Job.objects.get(pk=job_id).created_at)
        (job,) = claim_jobs(DB, "w", None, 1).jobs
        assert job.attempts == attempt
        status = transitions.end_attempt(
            DB,
            Fence.of(job),
            failure="error",
            error_type="ValueError",
            error=f"Traceback...\nValueError: boom {attempt}",
            duration_ms=5,
            delay=120,
        )
        statuses.append(status)
        row = Job.objects.get(pk=job_id)
        if status == "ready":
            now = database_now(DB)
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
    ja, jb = claim_jobs(DB, "w", None, 2).jobs
    assert (
        transitions.end_attempt(
            DB,
            Fence.of(ja),
            failure="permanent",
            error_type="E",
            error="no",
            duration_ms=1,
            then="failed",
        )
        == "failed"
    )
    assert (
        transitions.end_attempt(
            DB,
            Fence.of(jb),
            failure="cancelled",
            error_type="C",
            error="stop",
            duration_ms=1,
            then="cancelled",
        )
        == "cancelled"
    )
    assert {Job.objects.get(pk=a).status, Job.objects.get(pk=b).status} == {"failed", "cancelled"}
    with pytest.raises(ValueError, match="then must be"):
        transitions.end_attempt(
            DB, Fence.of(ja), failure="x", error_type="", error="", duration_ms=1, then="done"
        )


def test_error_text_is_capped_at_10_kb_keeping_the_end():
    enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    huge = "x" * 50_000 + "\nValueError: the real cause"
    transitions.end_attempt(
        DB, Fence.of(job), failure="error", error_type="ValueError", error=huge, duration_ms=1
    )
    row = Job.objects.get(pk=job.id)
    assert len(row.last_error) <= 10 * 1024
    assert row.last_error.endswith("ValueError: the real cause")
    assert "characters cut" in row.last_error
    assert len(JobAttempt.objects.get(job_id=job.id).traceback) <= 10 * 1024


def test_release_gives_the_attempt_back():
    job_id = enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    assert transitions.release(DB, [Fence.of(job)]) == [job_id]
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.attempts) == ("ready", 0)
    assert JobAttempt.objects.get(job_id=job_id).outcome == "released"
    assert transitions.release(DB, []) == []


def test_park_gives_the_attempt_back_to_wait_and_is_fenced():
    job_id = enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    stale = Fence(job_id, "w", job.attempts + 1)
    assert transitions.park(DB, stale, 60, "sleeping") is None  # not this attempt
    assert transitions.park(DB, Fence.of(job), 60, "sleeping 1 minute (nap)") == "waiting"
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.attempts, row.waiting_for) == ("waiting", 0, 0)
    assert 59 < seconds_between(row.run_after, database_now(DB)) <= 60
    attempt = JobAttempt.objects.get(job_id=job_id)
    assert (attempt.outcome, attempt.traceback) == ("parked", "sleeping 1 minute (nap)")


def test_a_park_whose_signal_came_meanwhile_is_due_at_once():
    from django_pqjobs.models import Signal

    job_id = enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    Signal.objects.create(job_id=job_id, name="go", payload=1)
    assert transitions.park(DB, Fence.of(job), 3600, "waiting for signal 'go'", "go") == "ready"
    row = Job.objects.get(pk=job_id)
    assert row.status == "ready" and row.run_after <= database_now(DB)
    assert JobAttempt.objects.get(job_id=job_id).traceback.endswith(
        "(its signal had come: due now)"
    )


def test_wake_due_wakes_parked_jobs_whose_time_came_and_nothing_else():
    due, later, other = (enqueue_job("t") for _ in range(3))
    for job in claim_jobs(DB, "w", None, 3).jobs:
        delay = {due: 0, later: 3600, other: 0}[job.id]
        transitions.park(DB, Fence.of(job), delay, "nap")
    # a job waiting for a dependency is not parked: never woken here
    Job.objects.filter(pk=other).update(waiting_for=1)
    assert transitions.wake_due(DB) == [(due, "default")]
    statuses = dict(Job.objects.values_list("id", "status"))
    assert statuses == {due: "ready", later: "waiting", other: "waiting"}


def test_rescue_returns_stale_jobs_and_fails_exhausted_ones():
    fresh = enqueue_job("t")
    stale = enqueue_job("t", max_attempts=3)
    exhausted = enqueue_job("t", max_attempts=1)
    jobs = claim_jobs(DB, "dead-worker", None, 3).jobs
    transitions.mark_started(DB, [Fence.of(job) for job in jobs])  # their handlers ran
    Job.objects.filter(pk__in=[stale, exhausted]).update(
        heartbeat_at=database_now(DB) - timedelta(minutes=30)
    )
    rescued = transitions.rescue_stale(DB, 1200)
    assert {(r.job_id, r.status) for r in rescued} == {(stale, "ready"), (exhausted, "failed")}
    assert Job.objects.get(pk=fresh).status == "running"
    lost = JobAttempt.objects.get(job_id=stale)
    assert lost.outcome == "lost" and "dead-worker" in lost.traceback
    assert Job.objects.get(pk=stale).error_type == "WorkerLost"


def test_rescue_gives_back_the_attempt_of_a_job_that_never_started():
    started, unstarted = enqueue_job("t", max_attempts=1), enqueue_job("t", max_attempts=1)
    jobs = claim_jobs(DB, "killed", None, 2).jobs
    transitions.mark_started(DB, [Fence.of(job) for job in jobs if job.id == started])
    Job.objects.filter(pk__in=[started, unstarted]).update(
        heartbeat_at=database_now(DB) - timedelta(minutes=30)
    )
    rescued = {r.job_id: r for r in transitions.rescue_stale(DB, 1200)}
    assert (rescued[started].status, rescued[started].charged) == ("failed", True)
    assert (rescued[unstarted].status, rescued[unstarted].charged) == ("ready", False)
    row = Job.objects.get(pk=unstarted)
    # the attempt number is not reused (it fences a worker that may still be alive)
    assert (row.attempts, row.max_attempts, row.error_type) == (1, 2, "WorkerLostBeforeStart")
    (again,) = claim_jobs(DB, "other", None, 1).jobs
    assert again.id == unstarted and again.attempts == 2


def test_a_job_that_keeps_killing_its_worker_before_its_start_is_recorded_ends():
    job_id = enqueue_job("t", max_attempts=2)
    statuses = []
    for _ in range(6):
        if Job.objects.get(pk=job_id).status != "ready":
            break
        claim_jobs(DB, "killed", None, 1)
        Job.objects.filter(pk=job_id).update(heartbeat_at=database_now(DB) - timedelta(minutes=30))
        statuses += [r.status for r in transitions.rescue_stale(DB, 1200)]
    # three attempts are given back (GIVE_BACK_LIMIT), then they count: 4 of 5, 5 of 5
    assert transitions.GIVE_BACK_LIMIT == 3
    assert statuses == ["ready", "ready", "ready", "ready", "failed"]


def test_rescue_honours_per_job_timeout():
    job_id = enqueue_job("t", timeout=5)
    claim_jobs(DB, "w", None, 1)
    # the heartbeat is fresh but the job has run far past timeout + stale timeout
    Job.objects.filter(pk=job_id).update(locked_at=database_now(DB) - timedelta(seconds=100))
    assert [r.job_id for r in transitions.rescue_stale(DB, 60)] == [job_id]


def test_only_one_rescuer_at_a_time():
    from django.db import transaction

    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [transitions.REAPER_LOCK_KEY])
        result: list = []
        t = threading.Thread(
            target=lambda: (
                result.append(transitions.rescue_stale(DB, 60)),
                connections.close_all(),
            )
        )
        t.start()
        t.join(bound(10))
    assert result == [None]


def test_cancel_and_requeue():
    claimed_first = enqueue_job("t")
    other = enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    assert job.id == claimed_first  # same priority: the older job first
    first_running = Job.objects.running().get()
    assert transitions.cancel(DB, other) == "cancelled"
    assert transitions.cancel(DB, first_running.pk) == "cancel_requested"
    assert Job.objects.get(pk=first_running.pk).cancel_requested_at is not None
    assert transitions.cancel(DB, other) is None
    assert transitions.cancel(DB, 999_999_999) is None
    assert transitions.requeue(DB, other)
    row = Job.objects.get(pk=other)
    assert (row.status, row.attempts, row.finished_at) == ("ready", 0, None)
    assert not transitions.requeue(DB, first_running.pk)


def test_heartbeat_reports_lost_jobs_and_cancel_requests():
    a, b = enqueue_job("t"), enqueue_job("t")
    ja, jb = claim_jobs(DB, "w", None, 2).jobs
    transitions.cancel(DB, jb.id)
    Job.objects.filter(pk=ja.id).update(locked_by="someone-else")
    result = heartbeat(DB, WorkerIdentity("w", "h", 1, None, 2), [Fence.of(ja), Fence.of(jb)])
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
    now = database_now(DB)
    Job.objects.filter(pk__in=[old_done, old_failed]).update(finished_at=now - timedelta(days=40))
    Job.objects.filter(pk=new_done).update(finished_at=now)
    deleted = housekeeping.prune(DB, {"done": 86400, "failed": 86400, "cancelled": None}, batch=1)
    assert deleted == {"done": 1, "failed": 1, "cancelled": 0, "expired": 0}
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
    (claimed,) = claim_jobs(DB, "w", None, 1).jobs
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
            "SELECT n_dead_tup, last_vacuum FROM pg_stat_user_tables "
            "WHERE relname = 'pqjobs_job_hot'"
        )
        dead, last_vacuum = cursor.fetchone()
    return int(dead), last_vacuum


@pytest.mark.slow
def test_job_tables_are_vacuumed_when_autovacuum_is_off_for_them():
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pqjobs_job_hot SET (autovacuum_enabled = false)")
    try:
        Job.objects.bulk_create([Job(job_type="t", payload={}) for _ in range(12_000)])
        assert not housekeeping.vacuum_if_needed(DB)  # live rows only: nothing to reclaim
        Job.objects.all().delete()
        assert _table_stats()[0] >= 12_000
        assert housekeeping.vacuum_if_needed(DB)
        dead, last_vacuum = _table_stats()
        assert dead == 0 and last_vacuum is not None
        assert not housekeeping.vacuum_if_needed(DB)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("ALTER TABLE pqjobs_job_hot RESET (autovacuum_enabled)")


# --- operator transitions: requeue numbering, run now, forced release, delete -------------


def test_requeue_numbers_attempts_on_with_a_fresh_bound():
    job_id = enqueue_job("t", max_attempts=2)
    for _ in range(2):
        (job,) = claim_jobs(DB, "w", None, 1).jobs
        transitions.end_attempt(
            DB, Fence.of(job), failure="error", error_type="E", error="boom", duration_ms=1
        )
        Job.objects.filter(pk=job_id).update(run_after=database_now(DB))
    assert Job.objects.get(pk=job_id).status == "failed"
    [requeued] = transitions.requeue_many(DB, [job_id])
    assert requeued == transitions.Requeued(job_id, "failed", 2, 4)
    (again,) = claim_jobs(DB, "w2", None, 1).jobs
    assert (again.attempts, again.max_attempts) == (3, 4)  # attempt 3 of 4: never reused
    assert again.retried_from == 2  # the claim carries it: the backoff counts from there
    assert list(JobAttempt.objects.filter(job_id=job_id).values_list("attempt", flat=True)) == [
        1,
        2,
    ]
    # the old last attempt's worker cannot record over the new one
    stale = Fence(job_id, "w", 2)
    assert (
        transitions.end_attempt(
            DB, stale, failure="error", error_type="E", error="late", duration_ms=1
        )
        is None
    )


def test_requeue_keeps_max_attempts_inside_32_bits():
    job_id = enqueue_job("t", max_attempts=2**31 - 1)
    Job.objects.filter(pk=job_id).update(status="failed", attempts=7)
    [requeued] = transitions.requeue_many(DB, [job_id])
    assert requeued.max_attempts == 2**31 - 1


def test_run_now_puts_a_due_job_at_the_head_of_its_priority():
    older = [enqueue_job("t") for _ in range(3)]
    Job.objects.filter(pk__in=older).update(run_after=database_now(DB) - timedelta(hours=1))
    newest = enqueue_job("t")
    urgent = enqueue_job("t", priority=5)
    delayed = enqueue_job("t", delay=3600)
    made = transitions.run_now_many(DB, [newest, delayed, 999_999_999])
    assert made == [transitions.MadeDue(newest, False), transitions.MadeDue(delayed, True)]
    claimed = [j.id for j in claim_jobs(DB, "w", None, 10).jobs]
    # the higher priority still goes first; then the two made due, in id order
    assert claimed == [urgent, newest, delayed, *older]


def test_run_now_skips_jobs_that_are_not_ready():
    running = enqueue_job("t")
    claim_jobs(DB, "w", None, 1)
    blocked = enqueue_job("t")
    Job.objects.filter(pk=blocked).update(status="blocked", blocked_by="paused")
    done = enqueue_job("t")
    Job.objects.filter(pk=done).update(status="done")
    assert transitions.run_now_many(DB, [running, blocked, done]) == []


def test_force_release_is_fenced_against_the_old_worker():
    job_id = enqueue_job("t", max_attempts=3)
    (job,) = claim_jobs(DB, "stuck-worker", None, 1).jobs
    old = Fence.of(job)
    assert transitions.force_release(DB, Fence(job_id, "other", 1), "x") is None
    assert transitions.force_release(DB, Fence(job_id, "stuck-worker", 2), "x") is None
    assert transitions.force_release(DB, old, "released by alice") == "ready"
    row = Job.objects.get(pk=job_id)
    # the attempt is given back by allowing one more, never by reusing its number
    assert (row.status, row.attempts, row.max_attempts) == ("ready", 1, 4)
    attempt = JobAttempt.objects.get(job_id=job_id)
    assert (attempt.attempt, attempt.worker_id, attempt.outcome, attempt.error_type) == (
        1,
        "stuck-worker",
        "released",
        "ReleasedByOperator",
    )
    assert attempt.traceback == "released by alice"
    assert transitions.force_release(DB, old, "again") is None  # no longer running
    (again,) = claim_jobs(DB, "new-worker", None, 1).jobs
    assert again.attempts == 2
    # the stuck worker wakes up: every verdict it records is fenced off
    assert not transitions.complete(DB, transitions.Completion(old, None, 5))
    assert (
        transitions.end_attempt(
            DB, old, failure="error", error_type="E", error="late", duration_ms=1
        )
        is None
    )
    assert transitions.force_release(DB, old, "x") is None
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.locked_by, row.attempts) == ("running", "new-worker", 2)


def test_force_release_honours_a_cancel_request():
    job_id = enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    transitions.cancel(DB, job_id)
    assert transitions.force_release(DB, Fence.of(job), "x") == "cancelled"
    assert Job.objects.get(pk=job_id).finished_at is not None


def test_delete_unless_running_keeps_running_jobs():
    running = enqueue_job("t")
    claim_jobs(DB, "w", None, 1)
    failed = enqueue_job("t")
    Job.objects.filter(pk=failed).update(status="failed")
    JobAttempt.objects.create(job_id=failed, attempt=1, outcome="error")
    ready = enqueue_job("tests.echo")
    deleted = transitions.delete_unless_running(DB, [running, failed, ready])
    assert deleted == [
        transitions.Deleted(failed, "t", "failed"),
        transitions.Deleted(ready, "tests.echo", "ready"),
    ]
    assert list(Job.objects.values_list("pk", flat=True)) == [running]
    assert not JobAttempt.objects.exists()


def test_completion_clears_the_error_of_earlier_attempts():
    job_id = enqueue_job("t")
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    transitions.end_attempt(
        DB, Fence.of(job), failure="error", error_type="ValueError", error="boom", duration_ms=1
    )
    Job.objects.filter(pk=job_id).update(run_after=database_now(DB))
    (job,) = claim_jobs(DB, "w", None, 1).jobs
    assert transitions.complete(DB, transitions.Completion(Fence.of(job), None, 3))
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.last_error, row.error_type) == ("done", "", "")
    assert JobAttempt.objects.get(job_id=job_id).traceback == "boom"  # the history keeps it


def test_claim_functions_migration_reverses_and_reapplies():
    def functions() -> tuple[bool, bool, str]:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT to_regproc('pqjobs_claim') IS NOT NULL, "
                "to_regproc('pqjobs_complete') IS NOT NULL, "
                "(SELECT l.lanname FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang "
                " WHERE p.proname = 'pqjobs_anyone_listens')"
            )
            return cursor.fetchone()

    assert functions() == (True, True, "plpgsql")
    try:
        call_command("migrate", "django_pqjobs", "0013", verbosity=0)
        assert functions() == (False, False, "sql")
    finally:
        call_command("migrate", "django_pqjobs", verbosity=0)
    assert functions() == (True, True, "plpgsql")
    job_id = enqueue_job("t")
    batch = claim_jobs(DB, "w", None, 5)
    assert [job.id for job in batch.jobs] == [job_id]
    fence = Fence.of(batch.jobs[0], batch.tids[job_id])
    assert transitions.complete_many(DB, [Completion(fence, None, 1)]) == {job_id}


def test_a_result_cannot_change_the_completion_around_it():
    """Results travel inside the completion's JSON document as strings: a result text that
    is not one JSON value is refused by the database, and no other job is touched."""
    target, bystander = enqueue_job("t"), enqueue_job("t")
    batch = claim_jobs(DB, "w", None, 2)
    fences = {job.id: Fence.of(job, batch.tids[job.id]) for job in batch.jobs}
    breakout = f"1],[{bystander},{fences[bystander].attempt},1,null,null,null"
    with pytest.raises(DatabaseError, match="json"):
        transitions.complete_many(DB, [Completion(fences[target], breakout, 1)])
    assert dict(Job.objects.values_list("pk", "status")) == {
        target: "running",
        bystander: "running",
    }


def test_triggers_fired_by_a_completion_keep_their_indexes():
    """A completion of a job under a concurrency limit gives its slot back and releases the
    next blocked job of its key, in triggers that run under the completion's planner
    settings: they must still find that job through its index, not by reading the table
    (which the statistics of an empty table would make look cheap)."""
    _a_table_the_statistics_call_empty()
    first, *waiting = (
        enqueue_job("tests.limited", {"k": "x", "seconds": 0}, queue="limits") for _ in range(3)
    )
    assert Job.objects.filter(pk__in=waiting, status="blocked").count() == 2  # at enqueue
    batch = claim_jobs(DB, "w", ["limits"], 3)
    assert [job.id for job in batch.jobs] == [first] and batch.blocked == 0

    def complete() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SET random_page_cost = 1000")  # index scans look expensive
        fence = Fence.of(batch.jobs[0], batch.tids[first])
        assert transitions.complete_many(DB, [Completion(fence, None, 1)]) == {first}

    release = plan_of(planned_inside(complete), "blocked_by = 'limit'")
    assert "Index Scan using pqjobs_job_blocked_key" in release, release
    assert "Seq Scan" not in release, release
    assert Job.objects.get(pk=waiting[0]).status == "ready"


def test_a_claimed_job_has_every_field_as_the_orm_reads_it():
    """pqjobs_claim()'s RETURNS TABLE is the one declaration of a claimed row: the worker
    builds the Job from it by name, and misses no field of the model."""
    first = enqueue_job("tests.noop")
    job_id = enqueue_job(
        "tests.limited",
        {"k": 1, "text": "é"},
        depends_on=[first],
        priority=Priority.HIGH,
        timeout=30,
    )
    Job.objects.filter(pk=job_id).update(
        status="ready", progress={"done": 1}, trace_context={"traceparent": "00-x"}
    )
    (claimed,) = [j for j in claim_jobs(DB, "w", None, 5).jobs if j.id == job_id]
    stored = Job.objects.get(pk=job_id)
    for field in Job._meta.concrete_fields:
        assert getattr(claimed, field.attname) == getattr(stored, field.attname), field.name


def test_a_claim_whose_columns_disagree_with_the_model_says_so():
    from django_pqjobs.worker.claiming import layout

    columns = ("id", "job_type", "attempts", "row_tid", "blocked_count")
    with pytest.raises(
        RuntimeError, match=r"the claim returns no .*payload.*run `manage\.py migrate`"
    ):
        layout(columns)
    with pytest.raises(RuntimeError, match="'colour', which is no field of a job"):
        layout((*columns, "colour"))
