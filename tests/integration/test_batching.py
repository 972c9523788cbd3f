"""Batched claiming (prefetch) and batched completion keep every per-job guarantee."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection

from django_pqjobs import enqueue_job, enqueue_many, signals
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.worker import queries
from django_pqjobs.worker.queries import Claimed, Completion
from django_pqjobs.worker.worker import Worker
from tests.conftest import wait_for
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]


def test_prefetch_follows_the_recent_job_duration():
    worker = Worker(concurrency=4, prefetch_max=100)
    assert worker._prefetch() == 0  # nothing known yet: claim only for free executors
    worker._average_job_seconds = 0.001
    assert worker._prefetch() == 100  # tiny jobs: claim ahead, capped
    worker._average_job_seconds = 0.01
    assert worker._prefetch() == 20
    worker._average_job_seconds = 2.0
    assert worker._prefetch() == 0  # long jobs: never hold them back from other workers
    assert Worker(concurrency=4, prefetch_max=0)._prefetch() == 0


def test_claims_are_made_in_half_capacity_batches():
    worker = Worker(concurrency=4, prefetch_max=500)
    assert worker._batch_size(free=504, capacity=504) == 252  # the other half comes next
    assert worker._batch_size(free=100, capacity=504) == 100
    assert worker._batch_size(free=4, capacity=4) == 4  # no prefetch: fill every executor
    assert worker._batch_size(free=3, capacity=6) == 3


def test_complete_many_fences_each_attempt_separately():
    ids = [enqueue_job("t") for _ in range(3)]
    jobs = queries.claim("default", "w", None, 3)
    lost = jobs[1]
    Job.objects.filter(pk=lost.id).update(attempts=5)  # rescued and claimed again elsewhere
    done = queries.complete_many(
        "default", [Completion(Claimed.of(j), f'{{"n": {j.id}}}', 3) for j in jobs]
    )
    assert done == {jobs[0].id, jobs[2].id}
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {ids[0]: "done", ids[1]: "running", ids[2]: "done"}
    assert Job.objects.get(pk=jobs[0].id).result == {"n": jobs[0].id}
    with pytest.raises(ValueError, match="one worker"):
        queries.complete_many(
            "default",
            [Completion(Claimed(1, "a", 1), None, 1), Completion(Claimed(2, "b", 1), None, 1)],
        )


def test_one_failing_job_in_a_batch_of_successes(worker_factory):
    ids = enqueue_many("tests.noop", [{}] * 150)
    bad = enqueue_job("tests.permanent")
    more = enqueue_many("tests.noop", [{}] * 150)
    worker_factory(concurrency=2)
    wait_for(lambda: not Job.objects.active().exists(), timeout=30)
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
        wait_for(lambda: not Job.objects.active().exists(), timeout=30)
    finally:
        signals.job_started.disconnect(on_start)
    # one executor runs jobs in claim order: batches never put a lower priority first
    assert len(started) == 300
    assert started == sorted(started, reverse=True)


def test_crash_in_the_middle_of_batches_loses_nothing():
    """kill -9 while jobs are prefetched and completions are pending; a second worker
    rescues everything the first held and every job ends done exactly once."""
    total = 3000
    enqueue_many("tests.effect_idempotent", [{}] * total)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PQJOBS_TEST_DATABASE": connection.settings_dict["NAME"],
        "WORKER_STALE_TIMEOUT": "2",
        "WORKER_REAP_INTERVAL": "0.5",
    }
    command = [sys.executable, "-m", "django", "run_jobs", "-c", "4", "-v", "0"]
    first = subprocess.Popen([*command, "--worker-id", "first"], cwd=ROOT, env=env)
    second = None
    try:
        wait_for(lambda: Job.objects.filter(status="done").count() > 300, timeout=30)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        held = Job.objects.filter(status="running", locked_by="first").count()
        assert held > 0
        second = subprocess.Popen([*command, "--worker-id", "second"], cwd=ROOT, env=env)
        wait_for(lambda: Job.objects.filter(status="done").count() == total, timeout=60)
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait(10)
    assert Effect.objects.count() == total
    assert set(JobAttempt.objects.values_list("outcome", flat=True)) <= {"lost"}
    assert JobAttempt.objects.count() == held
    assert not Job.objects.exclude(status="done").exists()
