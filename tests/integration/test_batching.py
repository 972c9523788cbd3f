"""Batched claiming (prefetch) and batched completion keep every per-job guarantee."""

from __future__ import annotations

import signal

import pytest
from django.db import connection

from django_pqjobs import enqueue_job, enqueue_many, signals, transitions
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.transitions import Completion, Fence
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import run_jobs, wait_for
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def test_complete_many_fences_each_attempt_separately():
    ids = [enqueue_job("t") for _ in range(3)]
    jobs = claim_jobs("default", "w", None, 3).jobs
    lost = jobs[1]
    Job.objects.filter(pk=lost.id).update(attempts=5)  # rescued and claimed again elsewhere
    done = transitions.complete_many(
        "default", [Completion(Fence.of(j), f'{{"n": {j.id}}}', 3) for j in jobs]
    )
    assert done == {jobs[0].id, jobs[2].id}
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {ids[0]: "done", ids[1]: "running", ids[2]: "done"}
    assert Job.objects.get(pk=jobs[0].id).result == {"n": jobs[0].id}
    with pytest.raises(ValueError, match="one worker"):
        transitions.complete_many(
            "default",
            [Completion(Fence(1, "a", 1), None, 1), Completion(Fence(2, "b", 1), None, 1)],
        )


def test_one_failing_job_in_a_batch_of_successes(worker_factory):
    ids = enqueue_many("tests.noop", [{}] * 150)
    bad = enqueue_job("tests.permanent")
    more = enqueue_many("tests.noop", [{}] * 150)
    worker_factory(concurrency=2)
    wait_for(lambda: not Job.objects.active().exists())
    assert Job.objects.filter(pk__in=ids + more, status="done").count() == 300
    assert Job.objects.get(pk=bad).status == "failed"
    assert JobAttempt.objects.count() == 1
    assert not Job.objects.filter(status="done", duration_ms__isnull=True).exists()
    assert not Job.objects.filter(status="done", finished_at__isnull=True).exists()


def test_priorities_hold_across_batches(worker_factory):
    started: list[int] = []

    def on_start(sender, job, worker_id, **kwargs):
        started.append(job.priority)

    enqueue_many("tests.noop", [{}] * 100, priority=1)
    enqueue_many("tests.noop", [{}] * 100, priority=5)
    enqueue_many("tests.noop", [{}] * 100, priority=9)
    signals.job_started.connect(on_start)
    try:
        worker_factory(concurrency=1)
        wait_for(lambda: not Job.objects.active().exists())
    finally:
        signals.job_started.disconnect(on_start)
    # one executor runs jobs in claim order: batches never put a lower priority first
    assert len(started) == 300
    assert started == sorted(started, reverse=True)


def other_sessions() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


@pytest.mark.slow
def test_crash_in_the_middle_of_batches_loses_nothing():
    """kill -9 while jobs are prefetched and completions are pending; a second worker
    rescues everything the first held and every job ends done exactly once."""
    total = 3000
    enqueue_many("tests.effect_idempotent", [{}] * total)
    fast = {"WORKER_STALE_TIMEOUT": "2", "WORKER_REAP_INTERVAL": "0.5"}
    command = ["-c", "4", "-v", "0"]
    with run_jobs(*command, "--worker-id", "first", **fast) as first:
        wait_for(lambda: Job.objects.filter(status="done").count() > 300)
        first.signal(signal.SIGKILL)
        first.wait(10)
    # The server finishes the statement a killed client sent last (a completion batch may
    # still commit): count what the first worker held once its sessions are gone.
    wait_for(lambda: not other_sessions())
    held = Job.objects.filter(status="running", locked_by="first").count()
    assert held > 0
    with run_jobs(*command, "--worker-id", "second", **fast):
        wait_for(lambda: Job.objects.filter(status="done").count() == total)
    assert Effect.objects.count() == total
    assert set(JobAttempt.objects.values_list("outcome", flat=True)) <= {"lost"}
    assert JobAttempt.objects.count() == held
    assert not Job.objects.exclude(status="done").exists()


def _other_sessions_active() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND state = 'active'"
        )
        return bool(cursor.fetchone()[0])
