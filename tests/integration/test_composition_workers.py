"""Composition under real workers: many processes finishing batch members at once, a
dependency whose worker is killed, and wait_for() woken by the finish."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction
from django.db.models import F
from django.utils import timezone

from django_pqjobs import (
    InvalidJobOption,
    JobExpired,
    JobFailed,
    JobNotFound,
    JobWasCancelled,
    WaitTimeout,
    batch,
    cancel_job,
    enqueue_job,
    wait_for,
    wait_for_async,
)
from django_pqjobs.models import Batch, Job
from django_pqjobs.testing import drain
from django_pqjobs.worker.housekeeping import expire_overdue
from tests.testapp.models import Effect

from ..helpers import bound, run_jobs
from ..helpers import wait_for as wait_until

pytestmark = pytest.mark.django_db(transaction=True)

BATCHES = 200
MEMBERS = 4


@pytest.mark.slow
def test_four_workers_finishing_the_last_members_of_200_batches_fire_each_callback_once():
    # Members become due together once the four workers are up, in an order that
    # interleaves the batches (every batch's first member, then every second one...), and
    # each takes a little time: each batch's members are claimed by different workers and
    # its last ones finish at the same moment on several of them.
    start = timezone.now() + timedelta(seconds=5)
    ids: list[int] = []
    for b in range(BATCHES):
        with batch(on_finish="tests.batch_callback", on_success="tests.batch_callback"):
            for m in range(MEMBERS):
                run_after = start + timedelta(microseconds=m * BATCHES + b)
                ids.append(enqueue_job("tests.sleep", {"seconds": 0.01}, run_after=run_after))
    fast = {"WORKER_REAP_INTERVAL": "60"}
    with (
        run_jobs("-c", "4", "--worker-id", "w1", **fast),
        run_jobs("-c", "4", "--worker-id", "w2", **fast),
        run_jobs("-c", "4", "--worker-id", "w3", **fast),
        run_jobs("-c", "4", "--worker-id", "w4", **fast),
    ):
        wait_until(
            lambda: (
                Job.objects.filter(callback_of__isnull=False, status="done").count() == 2 * BATCHES
            ),
            timeout=90,
        )
        time.sleep(0.5)  # a duplicate callback would be enqueued by now
    assert Job.objects.filter(pk__in=ids, status="done").count() == BATCHES * MEMBERS
    workers = set(Job.objects.filter(pk__in=ids).values_list("locked_by", flat=True))
    assert len(workers) >= 2, workers
    assert Batch.objects.filter(finishes=1, pending=0, done=MEMBERS).count() == BATCHES
    per_batch = {
        b.id: sorted(b.callback_jobs.values_list("job_type", flat=True))
        for b in Batch.objects.all()
    }
    assert all(types == ["tests.batch_callback"] * 2 for types in per_batch.values())
    assert Effect.objects.filter(key__startswith="callback:").count() == 2 * BATCHES


@pytest.mark.slow
def test_a_dependency_whose_worker_is_killed_is_rescued_and_its_dependent_then_runs():
    slow = enqueue_job("tests.sleep", {"seconds": 30, "report_start": True})
    dependent = enqueue_job("tests.noop", depends_on=[slow])
    fast = {"WORKER_STALE_TIMEOUT": "2", "WORKER_REAP_INTERVAL": "0.5"}
    with run_jobs("-c", "2", "--worker-id", "doomed", **fast) as doomed:
        wait_until(lambda: Job.objects.get(pk=slow).progress is not None)
        doomed.signal(signal.SIGKILL)
        doomed.wait(10)
    assert Job.objects.get(pk=dependent).status == "waiting"
    Job.objects.filter(pk=slow).update(payload={"seconds": 0.1})
    with run_jobs("-c", "2", "--worker-id", "rescuer", **fast):
        wait_until(lambda: Job.objects.get(pk=dependent).status == "done")
    assert Job.objects.get(pk=slow).attempts == 2


# --- wait_for ---------------------------------------------------------------------------


def test_wait_for_returns_the_result_soon_after_the_finish_commits(worker_factory):
    job_id = enqueue_job("tests.sleep", {"seconds": 0.5})
    worker_factory(concurrency=1)
    # Woken by NOTIFY: the fallback poll (an hour) comes long after the wait's bound.
    result = wait_for(job_id, timeout=bound(), poll_interval=3600)
    finished_at = Job.objects.get(pk=job_id).finished_at
    assert result["slept"] == 0.5
    assert finished_at is not None


def test_wait_for_is_woken_by_the_notification_not_the_poll():
    job_id = enqueue_job("tests.noop", delay=3600)
    woke: list[float] = []

    def waiter() -> None:
        try:
            wait_for(job_id, timeout=bound(), poll_interval=3600)
            woke.append(time.monotonic())
        finally:
            connections.close_all()

    thread = threading.Thread(target=waiter)
    thread.start()
    wait_until(lambda: Job.objects.get(pk=job_id).waited_on)
    Job.objects.filter(pk=job_id).update(status="done", result={"x": 1})
    thread.join(bound(30))
    assert woke, "wait_for did not return"  # ~ms in practice; the poll would take an hour


def test_wait_for_raises_for_failed_and_cancelled_jobs_and_unknown_ids():
    failed = enqueue_job("tests.permanent")
    drain()
    with pytest.raises(JobFailed, match="PermanentError: this will never work") as info:
        wait_for(failed, timeout=bound())
    assert (info.value.job_id, info.value.status) == (failed, "failed")
    cancelled = enqueue_job("tests.noop", delay=3600)
    cancel_job(cancelled)
    with pytest.raises(JobWasCancelled):
        wait_for(cancelled, timeout=bound())
    expired = enqueue_job("tests.noop", expires_in=60)
    Job.objects.filter(pk=expired).update(expires_at=F("run_after"))
    assert expire_overdue("default") == [expired]
    with pytest.raises(JobExpired, match="not started by its deadline"):
        wait_for(expired, timeout=bound())
    with pytest.raises(JobNotFound):
        wait_for(999999999, timeout=1)
    for bad in (0, -1, True, "12"):
        with pytest.raises(InvalidJobOption):
            wait_for(bad, timeout=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobOption, match="timeout"):
        wait_for(failed, timeout=-1)


def test_wait_for_times_out_and_refuses_to_run_inside_a_transaction():
    job_id = enqueue_job("tests.noop", delay=3600)
    began = time.monotonic()
    with pytest.raises(WaitTimeout, match=f"job #{job_id} did not finish within 0.3 s"):
        wait_for(job_id, timeout=0.3)
    assert 0.25 < time.monotonic() - began < bound(30)  # the upper bound only catches a hang
    with pytest.raises(InvalidJobOption, match=r"inside transaction\.atomic"), transaction.atomic():
        wait_for(job_id, timeout=1)


def test_wait_for_async_waits_without_blocking_the_event_loop():
    job_id = enqueue_job("tests.echo", {"a": 1}, delay=3600)

    async def main() -> tuple[dict, int]:
        ticks = 0

        async def finish_later() -> None:
            nonlocal ticks
            for _ in range(10):
                await asyncio.sleep(0.02)
                ticks += 1
            await asyncio.to_thread(finish)

        def finish() -> None:
            Job.objects.filter(pk=job_id).update(status="done", result={"echo": 1})
            connections.close_all()

        result, _ = await asyncio.gather(wait_for_async(job_id, timeout=10), finish_later())
        return result, ticks

    result, ticks = asyncio.run(main())
    assert result == {"echo": 1} and ticks == 10
