"""Process isolation: how a child ended is recorded, and the worker keeps its capacity."""

from __future__ import annotations

import os

import pytest

from django_pqjobs import cancel_job, enqueue_job
from django_pqjobs.models import Job, JobAttempt
from tests.helpers import wait_for, wait_status
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def failure_kinds(job_id: int) -> list[tuple[str, str]]:
    return list(JobAttempt.objects.filter(job_id=job_id).values_list("outcome", "error_type"))


def test_success_runs_in_another_process_with_its_own_connection(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.iso_echo", {"a": 1})
    job = wait_status(job_id, "done")
    assert job.result["payload"] == {"a": 1}
    assert job.result["pid"] != os.getpid()
    assert Effect.objects.get(key=f"iso:{job_id}:1").worker == str(job.result["pid"])
    assert job.progress == {"done": 1, "total": 1, "message": "done in child"}


def test_exception_is_passed_back_with_its_traceback_and_retried(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.iso_raise")
    job = wait_status(job_id, "failed")
    assert job.attempts == 2 and job.error_type == "KeyError"
    tracebacks = JobAttempt.objects.filter(job_id=job_id).values_list("traceback", flat=True)
    assert all("iso_raise" in t and "missing on attempt" in t for t in tracebacks)


def test_retry_and_permanent_error_from_a_child(worker_factory):
    worker_factory(concurrency=2)
    retried = enqueue_job("tests.iso_retry")
    permanent = enqueue_job("tests.iso_permanent", max_attempts=5)
    assert wait_status(retried, "done").result == {"attempt": 2}
    assert wait_status(permanent, "failed").attempts == 1
    assert failure_kinds(permanent) == [("permanent", "PermanentError")]


@pytest.mark.parametrize(
    "job_type, kind, error_type, message",
    [
        ("tests.iso_segfault", "crashed", "ChildCrashed(SIGSEGV)", "SIGSEGV"),
        ("tests.iso_exit", "exited", "ChildExited", "status 3"),
        ("tests.iso_sigkill", "killed", "ChildKilled", "out-of-memory"),
    ],
)
def test_child_deaths_are_classified(worker_factory, job_type, kind, error_type, message):
    worker = worker_factory(concurrency=2)
    job_id = enqueue_job(job_type)
    job = wait_status(job_id, "failed")
    assert failure_kinds(job_id) == [(kind, error_type)]
    assert message in job.last_error
    # the worker is still alive and at full capacity
    after = enqueue_job("tests.echo")
    wait_status(after, "done")
    assert len(worker._executors) == 2


def test_memory_limit_is_enforced_in_the_child(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.iso_memory")
    job = wait_status(job_id, "failed")
    assert job.error_type == "MemoryError"


def test_runaway_child_is_killed_at_its_timeout_and_retried(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.iso_forever")
    job = wait_status(job_id, "failed")
    assert [k for k, _ in failure_kinds(job_id)] == ["timeout", "timeout"]
    assert "process was killed" in job.last_error


def test_cancel_kills_an_isolated_running_job(worker_factory):
    worker_factory(heartbeat_interval=0.2)
    job_id = enqueue_job("tests.iso_sleep", {"seconds": 60})
    wait_status(job_id, "running")
    wait_for(lambda: Job.objects.get(pk=job_id).heartbeat_at is not None)
    assert cancel_job(job_id) == "cancel_requested"
    job = wait_status(job_id, "cancelled")
    assert failure_kinds(job_id) == [("cancelled", "JobCancelled")]
    assert job.finished_at is not None


def test_worker_wide_isolation(worker_factory):
    worker_factory(isolation="process")
    job_id = enqueue_job("tests.echo", {"x": 1})
    job = wait_status(job_id, "done")
    assert job.result["echo"] == {"x": 1}
    atomic = enqueue_job("tests.atomic_counter", {"name": "iso-worker"})
    wait_status(atomic, "done")  # atomic types keep running in the worker


def test_hooks_run_in_the_thread_for_thread_jobs(worker_factory):
    worker_factory()
    ok = enqueue_job("tests.noop", {"hooks": True})
    bad = enqueue_job("tests.permanent", {"hooks": True})
    wait_status(ok, "done")
    wait_status(bad, "failed")
    me = str(os.getpid())
    assert Effect.objects.get(key=f"pre:{ok}:1").worker == me
    assert Effect.objects.get(key=f"post:{ok}:1:ok").worker == me
    assert Effect.objects.filter(key=f"post:{bad}:1:PermanentError").exists()


def test_hooks_run_in_the_child_for_isolated_jobs(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.iso_echo", {"hooks": True})
    job = wait_status(job_id, "done")
    child = str(job.result["pid"])
    assert child != str(os.getpid())
    assert Effect.objects.get(key=f"pre:{job_id}:1").worker == child
    assert Effect.objects.get(key=f"post:{job_id}:1:ok").worker == child


def test_an_isolated_job_sees_the_same_context_as_in_a_thread(worker_factory):
    """A batch member, a dependent and a flow-limited job: the child gets the whole row."""
    from django_pqjobs import batch

    seen = {}
    for isolation in ("thread", "process"):
        first = enqueue_job("tests.echo", {"n": 1})
        with batch(label=isolation) as opened:
            member = enqueue_job("tests.what_it_sees", {"k": 1}, depends_on=[first])
        worker = worker_factory(isolation=isolation)
        job = wait_status(member, "done")
        worker.stop()
        assert job.result["batch"] == opened.id
        assert job.result["dependencies"] == {str(first): Job.objects.get(pk=first).result}
        assert job.result["job"]["concurrency_key"] == "k:1"
        assert job.result["job"]["batch_id"] == str(opened.id)
        seen[isolation] = job.result
    assert seen["process"]["pid"] != os.getpid() == seen["thread"]["pid"]
    ignored = {
        "id",
        "batch_id",
        "locked_by",
        "created_at",
        "run_after",
        "locked_at",
        "heartbeat_at",
        "updated_at",
        "started_at",
    }  # two different jobs, claimed at other times
    thread, process = (
        {k: v for k, v in seen[i]["job"].items() if k not in ignored} for i in ("thread", "process")
    )
    assert thread == process
