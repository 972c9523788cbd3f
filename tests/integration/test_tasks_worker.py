"""Tasks of the Tasks framework run by real ``run_jobs`` processes.

The apps under test (tests/tasks_builtin, tests/tasks_backport) import their framework and
never django_pqjobs; only this test module and the settings know the backend.
"""

from __future__ import annotations

import ast
import signal
from datetime import timedelta
from pathlib import Path
from types import ModuleType

import pytest
from django.db import transaction
from django.utils import timezone

from django_pqjobs import cancel_job, enqueue_job
from django_pqjobs.models import Job, JobAttempt
from tests.helpers import run_jobs, wait_for, wait_status
from tests.testapp.models import Effect

from .tasks_apps import APPS, framework, tasks_module

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def finished(*results: object) -> bool:
    ids = [int(result.id) for result in results]  # type: ignore[attr-defined]
    return not Job.objects.filter(pk__in=ids, status__in=["ready", "running"]).exists()


def stop(worker) -> None:
    worker.signal(signal.SIGTERM)
    assert worker.wait(120) == 0, worker.output()


@pytest.mark.parametrize("family", sorted(APPS))
def test_the_test_apps_never_import_django_pqjobs(family):
    module = tasks_module(family)
    for source in Path(module.__file__).parent.glob("*.py"):
        tree = ast.parse(source.read_text())
        imported = [
            name
            for node in ast.walk(tree)
            for name in (
                [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            )
            + ([node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        ]
        assert not [name for name in imported if name.startswith("django_pqjobs")], source


def test_a_framework_only_app_runs_under_run_jobs(tasks: ModuleType):
    fw = framework(tasks.FAMILY)
    status = fw.TaskResultStatus

    with pytest.raises(RuntimeError), transaction.atomic():  # rolled back: no job
        tasks.record.enqueue("rolled back")
        raise RuntimeError("the request failed")
    assert not Job.objects.exists()

    # Priority: one worker thread runs them highest first, tasks and native jobs alike.
    low = tasks.record.using(priority=-5).enqueue("low")
    native = enqueue_job("tests.effect", priority=3)
    high = tasks.record.using(priority=8).enqueue("high", payload={"n": [1, 2]})
    deferred_until = timezone.now() + timedelta(seconds=3)
    deferred = tasks.record.using(run_after=deferred_until).enqueue("deferred")
    added = tasks.async_add.enqueue(20, 22)
    context = tasks.describe_context.enqueue("ctx")
    async_context = tasks.async_describe_context.enqueue()
    failed = tasks.boom.enqueue("it broke")
    retried = tasks.always_fails.enqueue("again")
    recovered = tasks.fails_first_attempt.enqueue()
    timed_out = tasks.sleeps.enqueue(30)
    isolated = tasks.pid_of_process.enqueue()
    bad_return = tasks.returns_a_set.enqueue()

    with run_jobs("-c", "1", "--worker-id", "w-tasks") as worker:
        everything = (low, high, deferred, added, context, async_context, failed, retried)
        wait_for(lambda: finished(*everything, recovered, timed_out, isolated, bad_return), 40)
        stop(worker)
        pid = worker.pid

    ran = ["high", f"job:{native}", "low"]
    order = Effect.objects.filter(key__in=ran).order_by("id").values_list("key", flat=True)
    assert list(order) == ran
    job = Job.objects.get(pk=int(deferred.id))
    assert job.locked_at >= job.run_after == deferred_until

    def fetch(task, result):
        fetched = task.get_result(result.id)
        assert type(fetched) is fw.TaskResult
        return fetched

    high_result = fetch(tasks.record, high)
    assert high_result.status is status.SUCCESSFUL
    assert high_result.return_value == {"key": "high", "payload": {"n": [1, 2]}}
    assert high_result.worker_ids == ["w-tasks"]
    assert high_result.attempts == 1
    assert high_result.errors == []
    assert high_result.started_at <= high_result.finished_at
    assert high_result.enqueued_at <= high_result.started_at

    assert fetch(tasks.async_add, added).return_value == 42

    described = fetch(tasks.describe_context, context).return_value
    assert described == {
        "label": "ctx",
        "attempt": 1,
        "id": context.id,
        "status": "RUNNING",
        "status_class": f"{status.__module__}.TaskResultStatus",
        "args": ["ctx"],
        "kwargs": {},
        "worker_ids": ["w-tasks"],
        "errors": 0,
    }
    assert fetch(tasks.async_describe_context, async_context).return_value == {
        "attempt": 1,
        "id": async_context.id,
    }

    failure = fetch(tasks.boom, failed)
    assert failure.status is status.FAILED
    assert [e.exception_class for e in failure.errors] == [ValueError]
    assert "ValueError: it broke" in failure.errors[0].traceback
    assert (failure.attempts, failure.worker_ids) == (1, ["w-tasks"])

    # Retried with the backend's backoff (0.5 s), then failed for good.
    retried_result = fetch(tasks.always_fails, retried)
    assert retried_result.status is status.FAILED
    assert retried_result.attempts == 2
    assert [e.exception_class_path for e in retried_result.errors] == ["builtins.RuntimeError"] * 2
    first, second = JobAttempt.objects.filter(job_id=int(retried.id)).order_by("attempt")
    assert (second.started_at - first.finished_at).total_seconds() >= 0.5

    recovered_result = fetch(tasks.fails_first_attempt, recovered)
    assert recovered_result.status is status.SUCCESSFUL
    assert recovered_result.return_value == 2  # the context said attempt 2
    assert len(recovered_result.errors) == 1

    timeout_result = fetch(tasks.sleeps, timed_out)
    assert timeout_result.status is status.FAILED
    assert [e.exception_class_path for e in timeout_result.errors] == [
        "django_pqjobs.errors.JobTimeout"
    ]

    assert fetch(tasks.pid_of_process, isolated).return_value not in (pid, None)

    bad = fetch(tasks.returns_a_set, bad_return)
    assert bad.status is status.FAILED
    assert bad.errors[0].exception_class_path == "django_pqjobs.tasks.errors.TaskReturnValueError"
    assert "is a set" in bad.errors[0].traceback


def test_framework_signals_are_sent_in_the_worker(tasks: ModuleType):
    ok = tasks.signalled.enqueue(5)
    retried = tasks.fails_first_attempt.enqueue()
    with run_jobs("-c", "1") as worker:
        wait_for(lambda: finished(ok, retried))
        stop(worker)
    recorded = dict(Effect.objects.values_list("key", "worker"))
    module = f"{tasks.FAMILY}.base"
    expected = {
        f"{tasks.FAMILY} task_started {ok.id} RUNNING 1 PQJobsBackend {module}",
        f"{tasks.FAMILY} task_finished {ok.id} SUCCESSFUL 1 PQJobsBackend {module}",
        f"{tasks.FAMILY} task_started {retried.id} RUNNING 1 PQJobsBackend {module}",
        f"{tasks.FAMILY} task_finished {retried.id} READY 1 PQJobsBackend {module}",
        f"{tasks.FAMILY} task_started {retried.id} RUNNING 2 PQJobsBackend {module}",
        f"{tasks.FAMILY} task_finished {retried.id} SUCCESSFUL 2 PQJobsBackend {module}",
    }
    assert set(recorded) == expected
    assert set(recorded.values()) == {str(worker.pid)}


def test_cancelling_a_running_isolated_task_kills_it(tasks: ModuleType, worker_factory):
    result = tasks.sleeps_in_process.enqueue(60)
    worker_factory(heartbeat_interval=0.2)  # a cancel request is seen at the next heartbeat
    wait_for(lambda: Job.objects.get(pk=int(result.id)).heartbeat_at is not None)
    assert cancel_job(int(result.id)) == "cancel_requested"
    wait_status(int(result.id), "cancelled")
    fetched = tasks.sleeps_in_process.get_result(result.id)
    assert str(fetched.status) == "FAILED"
    assert [e.exception_class_path for e in fetched.errors] == ["django_pqjobs.errors.JobCancelled"]


def test_both_frameworks_under_one_setting_and_one_worker():
    builtin = tasks_module("django.tasks")
    backport = tasks_module("django_tasks")
    import django.tasks
    import django_tasks

    ours = builtin.add.enqueue(1, 2)
    theirs = backport.add.enqueue(3, 4)
    our_context = builtin.describe_context.enqueue("builtin")
    their_context = backport.describe_context.enqueue("backport")
    with run_jobs("-c", "2", "--burst") as worker:
        assert worker.wait(120) == 0, worker.output()

    for result, family, expected in ((ours, django.tasks, 3), (theirs, django_tasks, 7)):
        result.refresh()
        assert type(result) is family.TaskResult
        assert result.status is family.TaskResultStatus.SUCCESSFUL
        assert result.return_value == expected
    assert builtin.describe_context.get_result(our_context.id).return_value["status_class"] == (
        "django.tasks.base.TaskResultStatus"
    )
    assert backport.describe_context.get_result(their_context.id).return_value["status_class"] == (
        "django_tasks.base.TaskResultStatus"
    )


# --- stored paths that are not tasks ------------------------------------------------------------

TASK_CALL = {"args": [], "kwargs": {}, "task_backend": "default"}


@pytest.mark.usefixtures("unknown_job_types_allowed")
def test_stored_paths_that_are_not_tasks_fail_at_once_and_nothing_runs():
    cases = {
        "tests.testapp.lookalikes.plain_function": (
            "is a builtins.function, not a Task: it was not called"
        ),
        "tests.testapp.lookalikes.instance": "is a tests.testapp.lookalikes.Callable, not a Task",
        "tests.testapp.lookalikes.renamed_task": (
            "module 'tests.testapp.lookalikes' has no 'renamed_task' (was the task renamed"
        ),
        "tests.testapp.no_such_module.send": (
            "its module 'tests.testapp.no_such_module' could not be imported (ModuleNotFoundError"
        ),
        "django_pqjobs.enqueue.enqueue_job": "no handler registered",
        "tests.outside_apps.side_effect.run": "no handler registered",
    }
    ids = {name: enqueue_job(name, TASK_CALL) for name in cases}
    # A native job whose type is a dotted path in an installed app: not a task job, so its
    # module is not imported either.
    native = enqueue_job("tests.testapp.native_lookalike.handler", {"n": 1})
    for family in APPS:  # a renamed task of each framework installed
        try:
            module = tasks_module(family)
        except pytest.skip.Exception:
            continue
        name = f"{module.__name__}.add_renamed"
        cases[name] = f"module '{module.__name__}' has no 'add_renamed'"
        ids[name] = enqueue_job(name, TASK_CALL)

    with run_jobs("-c", "2", "--burst") as worker:
        assert worker.wait(120) == 0, worker.output()

    for name, message in cases.items():
        job = Job.objects.get(pk=ids[name])
        assert (job.status, job.attempts) == ("failed", 1), name
        assert message in job.last_error, (name, job.last_error)
    assert Job.objects.get(pk=native).status == "failed"
    assert "no handler registered" in Job.objects.get(pk=native).last_error
    assert list(Effect.objects.values_list("key", flat=True)) == []  # nothing imported or called
