"""Workers dedicated to a priority band: ``Worker(min_priority=...)`` and
``run_jobs --min-priority``."""

from __future__ import annotations

import pytest

from django_pqjobs import Priority, enqueue_job
from django_pqjobs.models import Job
from tests.helpers import bound, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def _one_job_per_level() -> dict[str, int]:
    return {
        "low": enqueue_job("tests.noop", priority=Priority.LOW),
        "normal": enqueue_job("tests.noop"),
        "just below high": enqueue_job("tests.noop", priority=Priority.HIGH - 1),
        "high": enqueue_job("tests.noop", priority="high"),
        "between": enqueue_job("tests.noop", priority=75),
        "critical": enqueue_job("tests.noop", priority=Priority.CRITICAL),
    }


def _statuses(jobs: dict[str, int]) -> dict[str, str]:
    by_id = dict(Job.objects.filter(pk__in=jobs.values()).values_list("pk", "status"))
    return {level: by_id[job_id] for level, job_id in jobs.items()}


TAKEN_FROM_HIGH = {
    "low": "ready",
    "normal": "ready",
    "just below high": "ready",
    "high": "done",
    "between": "done",
    "critical": "done",
}


def test_a_worker_with_a_priority_floor_runs_only_jobs_at_or_above_it(worker_factory):
    jobs = _one_job_per_level()
    worker = worker_factory(min_priority=Priority.HIGH, burst=True)
    worker.thread.join(bound(30))
    assert not worker.thread.is_alive(), "a burst worker exits once its band is drained"
    assert _statuses(jobs) == TAKEN_FROM_HIGH
    assert worker.claimed_total == 3
    # Jobs below the floor are left to the other workers.
    worker_factory(burst=True).thread.join(bound(30))
    assert set(_statuses(jobs).values()) == {"done"}


def test_a_running_worker_with_a_floor_leaves_lower_jobs_alone(worker_factory):
    worker = worker_factory(min_priority="critical")
    low = enqueue_job("tests.noop", priority=Priority.HIGH)
    critical = enqueue_job("tests.noop", priority=Priority.CRITICAL)
    wait_for(lambda: Job.objects.get(pk=critical).status == "done")
    assert Job.objects.get(pk=low).status == "ready"
    assert worker.claimed_total == 1


def test_run_jobs_min_priority_takes_a_name_or_a_number():
    jobs = _one_job_per_level()
    with run_jobs("--burst", "--min-priority", "high") as worker:
        assert worker.wait(60) == 0
        assert "priority >= 50" in worker.output()
    assert _statuses(jobs) == TAKEN_FROM_HIGH
    with run_jobs("--burst", "--min-priority", "-50") as worker:
        assert worker.wait(60) == 0
    assert set(_statuses(jobs).values()) == {"done"}
