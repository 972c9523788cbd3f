"""Jobs that fail together (an outage) come back spread out by the backoff's jitter."""

from __future__ import annotations

import statistics

import pytest

from django_pqjobs import enqueue_job, enqueue_many
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.operations import retry_jobs
from tests.helpers import wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _retry_delays(job_type: str, worker_factory) -> list[float]:
    """Fail 100 jobs of ``job_type`` once, together; the delay each got before its retry."""
    ids = enqueue_many(job_type, [{}] * 100)
    worker_factory(concurrency=4, burst=True)
    wait_for(lambda: JobAttempt.objects.filter(job_id__in=ids).count() == 100)
    assert set(Job.objects.filter(pk__in=ids).values_list("status", "attempts")) == {("ready", 1)}
    run_after = dict(Job.objects.filter(pk__in=ids).values_list("id", "run_after"))
    # The attempt's finished_at and the job's new run_after come from one statement (one
    # now()), so their difference is exactly the delay the backoff chose.
    return [
        (run_after[job_id] - failed_at).total_seconds()
        for job_id, failed_at in JobAttempt.objects.filter(job_id__in=ids).values_list(
            "job_id", "finished_at"
        )
    ]


def test_a_hundred_jobs_failing_together_retry_spread_over_the_jitter(worker_factory):
    delays = _retry_delays("tests.outage", worker_factory)
    # The default first step, 1 min, spread by ±10 %: from 54 to 66 s.
    assert all(54 <= d <= 66 for d in delays), (min(delays), max(delays))
    assert max(delays) - min(delays) > 8  # uniform over 12 s: not in lockstep
    assert statistics.pstdev(delays) > 2  # ~3.5 s for a uniform spread
    assert len({round(d, 1) for d in delays}) > 50  # hardly two in the same 100 ms


def test_without_jitter_they_retry_in_lockstep(worker_factory):
    delays = _retry_delays("tests.outage_exact_steps", worker_factory)
    assert delays == pytest.approx([60.0] * 100, abs=1e-3)


def test_a_job_retried_by_an_operator_backs_off_from_its_first_step_again(worker_factory):
    """Attempt numbers go on after a Retry, but the backoff and the budget start over."""
    job_id = enqueue_job("tests.outage_exact_steps", max_attempts=2)
    worker_factory(concurrency=1, burst=True)
    wait_for(lambda: JobAttempt.objects.filter(job_id=job_id).count() == 1)
    Job.objects.filter(pk=job_id).update(run_after=Job.objects.get(pk=job_id).created_at)
    worker_factory(concurrency=1, burst=True)
    wait_for(lambda: Job.objects.get(pk=job_id).status == "failed")

    retry_jobs([job_id], by="ops")
    worker_factory(concurrency=1, burst=True)
    wait_for(lambda: JobAttempt.objects.filter(job_id=job_id).count() == 3)
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.attempts, job.max_attempts, job.retried_from) == ("ready", 3, 4, 2)
    failed_at = JobAttempt.objects.get(job_id=job_id, attempt=3).finished_at
    # attempt 3 is the first of its round: the first step (1 min), not the third (30 min)
    assert (job.run_after - failed_at).total_seconds() == pytest.approx(60.0, abs=1e-3)

    Job.objects.filter(pk=job_id).update(run_after=job.created_at)
    worker_factory(concurrency=1, burst=True)
    wait_for(lambda: Job.objects.get(pk=job_id).status == "failed")
    [again] = retry_jobs([job_id])
    # as many attempts as the last round had (2), not twice the bound each time
    assert (again.attempts, again.max_attempts) == (4, 6)
