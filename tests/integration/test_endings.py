"""Every ending is announced once: ``job_finished`` (and a task's ``task_finished``) for what
the worker records, and for the endings made elsewhere: a rescue, an operator's cancel or
release, a ready duplicate replaced, a release at shutdown, and the dependents the database
cancels when a job they wait for fails, is cancelled or is deleted."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from types import ModuleType

import pytest
from django.db import transaction

from django_pqjobs import cancel_job, enqueue_job, signals
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job
from django_pqjobs.operations import delete_jobs, release_job
from django_pqjobs.worker.claiming import claim_jobs
from django_pqjobs.worker.housekeeping import reap_stale
from tests.helpers import wait_for, wait_status
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def announced() -> Iterator[Counter[tuple[int, str]]]:
    """(job id, outcome) -> how many times job_finished said so, in this process."""
    seen: Counter[tuple[int, str]] = Counter()

    def receiver(sender: str, job: Job, outcome: str, **kwargs: object) -> None:
        seen[(job.id, outcome)] += 1

    signals.job_finished.connect(receiver, dispatch_uid="test_endings")
    try:
        yield seen
    finally:
        signals.job_finished.disconnect(dispatch_uid="test_endings")


def stale_running(job_id: int, *, attempts: int, max_attempts: int) -> None:
    """As a worker that died an hour ago leaves a job (its handler had started)."""
    long_ago = database_now("default") - timedelta(hours=1)
    Job.objects.filter(pk=job_id).update(
        status="running",
        attempts=attempts,
        max_attempts=max_attempts,
        locked_by="ghost",
        locked_at=long_ago,
        heartbeat_at=long_ago,
        started_at=long_ago,
    )


def test_a_rescue_announces_each_job_and_the_dependents_it_cancelled(announced):
    again = enqueue_job("tests.noop")
    last = enqueue_job("tests.noop")
    dependent = enqueue_job("tests.noop", depends_on=[last])
    below = enqueue_job("tests.noop", depends_on=[dependent])  # cancelled in cascade
    stale_running(again, attempts=1, max_attempts=3)
    stale_running(last, attempts=3, max_attempts=3)
    reap_stale("default", 60)
    assert wait_status(last, "failed").error_type == "WorkerLost"
    assert Job.objects.get(pk=below).status == "cancelled"
    assert announced == Counter(
        {(again, "retry"): 1, (last, "failed"): 1, (dependent, "cancelled"): 1,
         (below, "cancelled"): 1}
    )  # fmt: skip


def test_an_operators_cancel_is_announced_once_it_commits(announced):
    first = enqueue_job("tests.noop")
    dependent = enqueue_job("tests.noop", depends_on=[first])
    with transaction.atomic():
        assert cancel_job(first) == "cancelled"
        assert not announced  # not before the commit
    assert announced == Counter({(first, "cancelled"): 1, (dependent, "cancelled"): 1})
    kept = enqueue_job("tests.noop")
    with pytest.raises(RuntimeError), transaction.atomic():
        cancel_job(kept)
        raise RuntimeError("rolled back")
    assert (kept, "cancelled") not in announced
    assert Job.objects.get(pk=kept).status == "ready"


def test_deleting_a_job_announces_the_dependents_it_cancelled(announced):
    first = enqueue_job("tests.noop")
    dependent = enqueue_job("tests.noop", depends_on=[first])
    delete_jobs([first])
    assert Job.objects.get(pk=dependent).status == "cancelled"
    assert announced == Counter({(dependent, "cancelled"): 1})


def test_a_replaced_duplicate_and_an_operators_release_are_announced(announced):
    old = enqueue_job("tests.noop", dedupe_key="k")
    new = enqueue_job("tests.noop", dedupe_key="k", dedupe="replace")
    assert new != old and Job.objects.get(pk=old).status == "cancelled"
    stuck = enqueue_job("tests.noop", priority=100)
    claim_jobs("default", "stuck-worker", None, 1)
    assert release_job(stuck, worker_id="stuck-worker", attempt=1) == "ready"
    assert announced == Counter({(old, "cancelled"): 1, (stuck, "released"): 1})


def test_a_failure_recorded_by_a_worker_announces_the_dependents_it_cancelled(
    worker_factory, announced
):
    failing = enqueue_job("tests.permanent")
    dependent = enqueue_job("tests.noop", depends_on=[failing])
    below = enqueue_job("tests.noop", depends_on=[dependent])
    worker_factory()
    wait_status(below, "cancelled")
    wait_for(lambda: (below, "cancelled") in announced)
    assert announced == Counter(
        {(failing, "failed"): 1, (dependent, "cancelled"): 1, (below, "cancelled"): 1}
    )


def test_a_release_at_shutdown_is_announced(worker_factory, announced):
    worker = worker_factory(shutdown_timeout=0.2)
    sleeper = enqueue_job("tests.sleep", {"seconds": 5})
    wait_status(sleeper, "running")
    worker.stop()
    wait_status(sleeper, "ready")
    wait_for(lambda: announced[(sleeper, "released")] == 1)


def test_a_task_rescued_to_failed_sends_task_finished(tasks: ModuleType):
    result = tasks.signalled.enqueue(5)
    job_id = int(result.id)
    stale_running(job_id, attempts=1, max_attempts=1)
    reap_stale("default", 60)
    assert wait_status(job_id, "failed").error_type == "WorkerLost"
    keys = list(Effect.objects.values_list("key", flat=True))
    assert [k for k in keys if " task_finished " in k] == [
        f"{tasks.FAMILY} task_finished {result.id} FAILED 1 PQJobsBackend {tasks.FAMILY}.base"
    ]
