"""The Tasks framework backend without a worker: enqueue, results, options, checks, signals.

Each test runs once per framework installed (``tasks`` fixture: django.tasks on Django 6.1+,
the django_tasks backport where it is installed).
"""

from __future__ import annotations

import decimal
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from django_pqjobs import DuplicateJob, cancel_job, enqueue_job, transitions
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.tasks import PQJobsBackend, TaskArgumentsError
from django_pqjobs.worker.claiming import claim_jobs
from django_pqjobs.worker.housekeeping import expire_overdue
from tests.helpers import bound
from tests.testapp.models import Effect

from .tasks_apps import framework

pytestmark = pytest.mark.django_db
ROOT = Path(__file__).resolve().parents[2]


def family_of(tasks: ModuleType) -> ModuleType:
    return framework(tasks.FAMILY)


def path(tasks: ModuleType, name: str) -> str:
    return f"{tasks.__name__}.{name}"


# --- enqueue ------------------------------------------------------------------------------------


def test_enqueue_inserts_one_job_and_returns_a_ready_result_of_the_callers_family(tasks):
    result = tasks.add.enqueue(2, 3)

    fw = family_of(tasks)
    assert type(result) is fw.TaskResult
    assert result.status is fw.TaskResultStatus.READY
    job = Job.objects.get()
    assert result.id == str(job.id)
    assert (result.args, result.kwargs, result.backend) == ([2, 3], {}, "default")
    assert result.task is tasks.add
    assert job.job_type == path(tasks, "add")
    assert job.payload == {"args": [2, 3], "kwargs": {}, "task_backend": "default"}
    assert (job.status, job.queue, job.priority, job.max_attempts) == ("ready", "default", 0, 1)
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value


@pytest.mark.django_db(transaction=True)
def test_enqueue_commits_with_the_callers_transaction_and_notifies_on_commit(tasks, listener):
    with transaction.atomic():
        Effect.objects.create(key="order")
        result = tasks.record.enqueue("k")
        assert list(listener.notifies(timeout=0.2)) == []
    assert [n.payload for n in listener.notifies(timeout=2, stop_after=1)] == ["emails"]
    assert Job.objects.get(pk=int(result.id)).queue == "emails"


@pytest.mark.django_db(transaction=True)
def test_enqueue_rolls_back_with_the_callers_transaction(tasks, listener):
    with pytest.raises(RuntimeError), transaction.atomic():
        Effect.objects.create(key="order")
        tasks.record.enqueue("k")
        raise RuntimeError("the view failed")
    assert not Job.objects.exists()
    assert not Effect.objects.exists()
    assert list(listener.notifies(timeout=0.3)) == []


def test_enqueue_on_commit_through_transaction_on_commit(tasks, django_capture_on_commit_callbacks):
    from functools import partial

    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        transaction.on_commit(partial(tasks.add.enqueue, 1, 1))
        assert not Job.objects.exists()
    assert Job.objects.get().payload["args"] == [1, 1]


def test_using_sets_queue_priority_and_run_after(tasks):
    when = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    tasks.record.using(priority=7, run_after=when).enqueue("k", payload={"a": [1, (2, 3)]})
    job = Job.objects.get()
    assert (job.queue, job.priority, job.run_after) == ("emails", 7, when)
    assert job.payload["kwargs"] == {"payload": {"a": [1, [2, 3]]}}  # tuples become lists


def test_task_priority_and_native_priority_share_one_scale(tasks):
    # Higher runs first, across tasks and native jobs alike: claim order is the run order.
    low_task = tasks.add.using(priority=-10).enqueue(0, 0)
    native_5 = enqueue_job("tests.noop", priority=5)
    high_task = tasks.add.using(priority=10).enqueue(0, 0)
    native_0 = enqueue_job("tests.noop")
    claimed = claim_jobs("default", "w", None, 10).jobs
    assert [job.id for job in claimed] == [int(high_task.id), native_5, native_0, int(low_task.id)]


@pytest.mark.parametrize(
    ("args", "kwargs", "where", "what"),
    [
        ((datetime(2030, 1, 1, tzinfo=UTC),), {}, "args[0]", "datetime.datetime"),
        ((), {"amount": decimal.Decimal("1.5")}, "kwargs['amount']", "decimal.Decimal"),
        ((uuid.uuid4(),), {}, "args[0]", "uuid.UUID"),
        ((), {"tags": {"a"}}, "kwargs['tags']", "set"),
        ((b"raw",), {}, "args[0]", "bytes"),
        ((), {"by_id": {1: "a"}}, "kwargs['by_id']", "key 1 that is not a string"),
        ((float("nan"),), {}, "args[0]", "nan"),
        ((), {"deep": [{"when": timedelta(1)}]}, "kwargs['deep'][0]['when']", "datetime.timedelta"),
        ((object(),), {}, "args[0]", "object"),
    ],
)
def test_arguments_that_do_not_round_trip_through_json_are_refused(
    tasks, args, kwargs, where, what
):
    with pytest.raises(TaskArgumentsError) as caught:
        tasks.add.enqueue(*args, **kwargs)
    message = str(caught.value)
    assert path(tasks, "add") in message
    assert where in message
    assert what in message
    assert isinstance(caught.value, TypeError)
    assert not Job.objects.exists()


def test_a_queue_not_in_queues_is_refused(tasks):
    fw = family_of(tasks)
    invalid = fw.exceptions.InvalidTask if tasks.FAMILY == "django.tasks" else None
    invalid = invalid or fw.exceptions.InvalidTaskError
    with pytest.raises(invalid, match="Queue 'nope' is not valid"):
        tasks.add.using(queue_name="nope")
    with pytest.raises(invalid, match="Queue 'nope' is not valid"):
        fw.task(queue_name="nope")(tasks.add.func)
    assert not Job.objects.exists()


def test_enqueue_sends_task_enqueued(tasks):
    received = []

    def receiver(sender, task_result, **kwargs):
        received.append((sender, task_result))

    signals = __import__(f"{tasks.FAMILY}.signals", fromlist=["task_enqueued"])
    signals.task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 2)
    finally:
        signals.task_enqueued.disconnect(receiver)
    assert received == [(PQJobsBackend, result)]


@pytest.mark.django_db(transaction=True)
def test_aenqueue_and_aget_result(tasks):
    async def scenario():
        result = await tasks.async_add.aenqueue(1, 2)
        fetched = await tasks.async_add.aget_result(result.id)
        await fetched.arefresh()
        return result, fetched

    result, fetched = async_to_sync(scenario)()
    assert fetched.id == result.id
    assert fetched.args == [1, 2]
    assert str(fetched.status) == "READY"


# --- results ------------------------------------------------------------------------------------


@pytest.mark.parametrize("result_id", ["123456789", "abc", "", "-1", "1.5", "9" * 30, " 1"])
def test_get_result_of_an_unknown_or_malformed_id_raises_does_not_exist(tasks, result_id):
    tasks.add.enqueue(1, 1)  # id 1 or so exists; none of the ids asked for does
    fw = family_of(tasks)
    with pytest.raises(fw.exceptions.TaskResultDoesNotExist):
        tasks.add.get_backend().get_result(result_id)
    with pytest.raises(fw.exceptions.TaskResultDoesNotExist):
        tasks.add.get_result(result_id)


def test_get_result_of_a_native_job_raises_does_not_exist(tasks):
    job_id = enqueue_job("tests.noop", {"args": [], "kwargs": {}})
    fw = family_of(tasks)
    with pytest.raises(fw.exceptions.TaskResultDoesNotExist, match="no task result"):
        tasks.add.get_backend().get_result(str(job_id))


def test_get_result_of_another_task_raises_mismatch(tasks):
    result = tasks.add.enqueue(1, 1)
    fw = family_of(tasks)
    with pytest.raises(fw.exceptions.TaskResultMismatch):
        tasks.boom.get_result(result.id)


def test_results_of_a_job_that_succeeded_on_its_second_attempt(tasks):
    result = tasks.add.enqueue(2, 2)
    job_id = int(result.id)
    _fail_attempt(job_id, "w1", "ValueError", "Traceback ...\nValueError: first try")
    _claim(job_id, "w2")
    Job.objects.filter(pk=job_id).update(status="done", result=4, finished_at=_db_now())

    fetched = tasks.add.get_result(result.id)
    fw = family_of(tasks)
    assert type(fetched) is fw.TaskResult
    assert fetched.status is fw.TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 4
    assert fetched.worker_ids == ["w1", "w2"]
    assert fetched.attempts == 2
    assert [(e.exception_class_path, e.exception_class) for e in fetched.errors] == [
        ("builtins.ValueError", ValueError)
    ]
    assert "first try" in fetched.errors[0].traceback
    job = Job.objects.get(pk=job_id)
    assert fetched.enqueued_at == job.created_at
    assert fetched.finished_at == job.finished_at
    assert fetched.last_attempted_at == job.locked_at
    assert fetched.started_at == JobAttempt.objects.get(job_id=job_id).started_at

    result.refresh()  # the enqueue() result catches up
    assert result.status is fw.TaskResultStatus.SUCCESSFUL
    assert result.return_value == 4
    assert result.worker_ids == ["w1", "w2"]


def test_results_of_running_failed_and_cancelled_jobs(tasks):
    fw = family_of(tasks)
    running = tasks.add.enqueue(1, 1)
    _claim(int(running.id), "w1")
    fetched = tasks.add.get_result(running.id)
    assert fetched.status is fw.TaskResultStatus.RUNNING
    assert (fetched.worker_ids, fetched.errors, fetched.finished_at) == (["w1"], [], None)

    failed = tasks.boom.enqueue("x")
    _fail_attempt(int(failed.id), "w1", "tests.errors.Custom", "custom", then="failed")
    fetched = tasks.boom.get_result(failed.id)
    assert fetched.status is fw.TaskResultStatus.FAILED
    assert [e.exception_class_path for e in fetched.errors] == ["tests.errors.Custom"]
    assert fetched.finished_at is not None
    with pytest.raises(ValueError, match="failed"):
        _ = fetched.return_value

    timed_out = tasks.boom.enqueue("y")
    _fail_attempt(int(timed_out.id), "w1", "JobTimeout", "ran past its timeout", then="failed")
    fetched = tasks.boom.get_result(timed_out.id)
    assert [e.exception_class_path for e in fetched.errors] == ["django_pqjobs.errors.JobTimeout"]

    cancelled = tasks.add.enqueue(3, 3)
    assert cancel_job(int(cancelled.id)) == "cancelled"
    fetched = tasks.add.get_result(cancelled.id)
    assert fetched.status is fw.TaskResultStatus.FAILED
    assert [e.exception_class_path for e in fetched.errors] == ["django_pqjobs.errors.JobCancelled"]
    assert "cancelled" in fetched.errors[0].traceback
    assert fetched.attempts == 0


def _db_now() -> datetime:
    return database_now("default")


def _claim(job_id: int, worker: str) -> None:
    Job.objects.filter(pk=job_id).update(status="running", locked_by=worker)
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET attempts = attempts + 1, locked_at = now() WHERE id = %s",
            [job_id],
        )


def _fail_attempt(job_id: int, worker: str, error_type: str, text: str, then="auto") -> None:
    _claim(job_id, worker)
    job = Job.objects.get(pk=job_id)
    transitions.end_attempt(
        "default",
        transitions.Fence(job_id, worker, job.attempts),
        failure="error",
        error_type=error_type,
        error=text,
        duration_ms=1,
        then=then,
    )


# --- options ------------------------------------------------------------------------------------


def test_backend_options_give_defaults_and_pqjobs_fills_the_rest(tasks):
    tasks.always_fails.enqueue("x")  # backend "retrying": MAX_ATTEMPTS 2
    tasks.add.enqueue(1, 1)  # backend "default": MAX_ATTEMPTS 1
    by_type = dict(Job.objects.values_list("job_type", "max_attempts"))
    assert by_type == {path(tasks, "always_fails"): 2, path(tasks, "add"): 1}
    assert Job.objects.get(job_type=path(tasks, "add")).timeout_seconds is None


def test_task_keywords_set_the_jobs_options(tasks):
    tasks.sleeps.enqueue(0.1)
    job = Job.objects.get()
    assert (job.max_attempts, job.timeout_seconds) == (1, 1.0)
    from django_pqjobs.registry import registry

    assert registry.get(path(tasks, "pid_of_process")).isolation == "process"


def test_bad_task_options_fail_when_the_task_is_declared(tasks):
    fw = family_of(tasks)
    invalid = getattr(fw.exceptions, "InvalidTask", None) or fw.exceptions.InvalidTaskError
    with pytest.raises(invalid, match="max_attempts must be a whole number of at least 1"):
        fw.task(max_attempts=0)(module_level_function)
    with pytest.raises(invalid, match="isolation must be one of"):
        fw.task(isolation="container")(module_level_function)
    with pytest.raises(invalid, match="memory_limit needs isolation='process'"):
        fw.task(memory_limit="512M")(module_level_function)
    with pytest.raises(TypeError, match="max_attempt"):
        fw.task(max_attempt=3)(module_level_function)


def test_a_task_no_worker_could_import_is_refused(tasks):
    """A worker imports a task by its module path; ``__main__`` there is manage.py."""
    fw = family_of(tasks)
    invalid = getattr(fw.exceptions, "InvalidTask", None) or fw.exceptions.InvalidTaskError

    def in_a_script() -> int:
        return 1

    in_a_script.__module__ = "__main__"
    in_a_script.__qualname__ = "in_a_script"
    with pytest.raises(invalid, match=r"'__main__\.in_a_script' is defined in a script"):
        fw.task(in_a_script)
    for module in ("__mp_main__", None):  # a spawned child's script; `manage.py shell`
        in_a_script.__module__ = module
        with pytest.raises(invalid, match="workers import a task by its module path"):
            fw.task(in_a_script)
    # `manage.py shell -c`: the code runs in the shell command's module, which lacks it
    in_a_script.__module__ = "django.core.management.commands.shell"
    declared = fw.task(in_a_script)
    with pytest.raises(invalid, match="is not found at its module path"):
        declared.enqueue()
    assert not Job.objects.exists()


def test_task_options_decorator_declares_options_on_any_version(tasks):
    from django_pqjobs.registry import registry
    from django_pqjobs.tasks import task_options

    fw = family_of(tasks)
    declared = fw.task(queue_name="emails")(
        task_options(max_attempts=4, timeout=30, backoff=[1, 2])(module_level_function)
    )
    declared.enqueue()
    job = Job.objects.get()
    assert (job.queue, job.max_attempts, job.timeout_seconds) == ("emails", 4, 30.0)
    assert registry.get(declared.module_path).backoff.steps == (1.0, 2.0)  # (jittered ±10 %)
    # @task(...) keywords win over @task_options
    again = fw.task(max_attempts=2)(task_options(max_attempts=9, timeout=5)(other_function))
    again.enqueue()
    job = Job.objects.get(job_type=again.module_path)
    assert (job.max_attempts, job.timeout_seconds) == (2, 5.0)


def test_task_options_refuses_bad_values_and_the_wrong_place():
    from django_pqjobs import InvalidJobOption
    from django_pqjobs.tasks import task_options

    with pytest.raises(InvalidJobOption, match="timeout"):
        task_options(timeout=-1)
    with pytest.raises(InvalidJobOption, match="unknown option"):
        task_options(retries=3)
    with pytest.raises(InvalidJobOption, match="under @task"):
        task_options(max_attempts=2)(type("T", (), {"func": 1})())


def test_dedupe_key_option_skips_or_refuses_duplicates(tasks):
    fw = family_of(tasks)
    keyed = fw.task(dedupe_key=lambda order_id: f"order:{order_id}")(module_level_function)
    first = keyed.enqueue(order_id=1)
    second = keyed.enqueue(order_id=1)
    assert second.id == first.id
    assert keyed.enqueue(order_id=2).id != first.id
    assert Job.objects.get(pk=int(first.id)).dedupe_key == "order:1"
    strict = fw.task(dedupe_key="singleton", dedupe="error")(other_function)
    strict.enqueue()
    with pytest.raises(DuplicateJob, match="singleton"):
        strict.enqueue()


def test_fair_key_option_gives_a_task_call_its_key(tasks, settings):
    fw = family_of(tasks)
    by_order = fw.task(fair_key=lambda order_id: f"tenant:{order_id % 2}")(module_level_function)
    literal = fw.task(fair_key="imports")(other_function)
    ids = [int(by_order.enqueue(order_id=n).id) for n in (1, 2)] + [int(literal.enqueue().id)]
    keys = dict(Job.objects.filter(pk__in=ids).values_list("pk", "fair_key"))
    assert keys == {ids[0]: "tenant:1", ids[1]: "tenant:0", ids[2]: "imports"}
    assert not Job.objects.filter(pk__in=ids, fair_turn__isnull=True).exists()  # turns given
    invalid = getattr(fw.exceptions, "InvalidTask", None) or fw.exceptions.InvalidTaskError
    with pytest.raises(invalid, match="fair_key must not contain control characters"):
        fw.task(fair_key="bad\x07key")(expiring_function)
    # a task without one takes its queue's, a function of its call
    settings.PQJOBS = {
        **settings.PQJOBS,
        "FAIR_QUEUES": {"default": lambda p: f"tenant:{p['kwargs']['order_id']}"},
    }
    plain = fw.task()(unique_function)
    assert Job.objects.get(pk=int(plain.enqueue(order_id=7).id)).fair_key == "tenant:7"


def test_a_unique_task_is_one_job_per_arguments_and_window(tasks):
    fw = family_of(tasks)
    unique = fw.task(unique_for="1h")(unique_function)
    first = unique.enqueue(order_id=1)
    again = unique.enqueue(order_id=1)
    assert again.id == first.id  # the existing job's result, in its real state
    assert unique.enqueue(order_id=2).id != first.id
    job = Job.objects.get(pk=int(first.id))
    assert job.dedupe_key.startswith("payload#") and job.unique_states == 7
    Job.objects.filter(pk=job.pk).update(status="done")
    assert unique.enqueue(order_id=1).id == first.id  # whatever became of it, this hour
    strict = fw.task(unique_by=["kwargs"], unique_states="done", dedupe="error")(
        other_unique_function
    )
    strict.enqueue(n=1)
    with pytest.raises(DuplicateJob):
        strict.enqueue(n=1)


def test_a_task_not_started_by_its_deadline_ends_failed_with_job_expired(tasks):
    fw = family_of(tasks)
    timed = fw.task(expires_in=60)(expiring_function)
    result = timed.enqueue()
    job = Job.objects.get(pk=int(result.id))
    assert job.expires_at - job.run_after == timedelta(seconds=60)
    Job.objects.filter(pk=job.pk).update(expires_at=job.run_after)
    assert expire_overdue("default") == [job.pk]
    fetched = timed.get_result(result.id)
    assert fetched.status is fw.TaskResultStatus.FAILED
    assert [e.exception_class_path for e in fetched.errors] == ["django_pqjobs.errors.JobExpired"]
    assert "deadline" in fetched.errors[0].traceback and fetched.attempts == 0


def expiring_function() -> None:
    return None


def module_level_function(order_id: int = 0) -> None:
    return None


def unique_function(order_id: int = 0) -> None:
    return None


def other_unique_function(n: int = 0) -> None:
    return None


def other_function() -> None:
    return None


def test_bad_backend_options_fail_when_the_backend_is_created(tasks):
    fw = family_of(tasks)
    invalid_backend = (
        getattr(fw.exceptions, "InvalidTaskBackend", None) or fw.exceptions.InvalidTaskBackendError
    )
    bad = {"BACKEND": "django_pqjobs.tasks.PQJobsBackend", "OPTIONS": {"MAX_ATTEMPTS": 0}}
    message = r"TASKS\['bad'\]\['OPTIONS'\]\['MAX_ATTEMPTS'\] must be a whole number"
    with (
        override_settings(TASKS={**settings.TASKS, "bad": bad}),
        pytest.raises(invalid_backend, match=message),
    ):
        fw.task(backend="bad")(module_level_function)
    typo = {"BACKEND": "django_pqjobs.tasks.PQJobsBackend", "OPTIONS": {"MAX_ATEMPTS": 2}}
    with (
        override_settings(TASKS={**settings.TASKS, "bad": typo}),
        pytest.raises(invalid_backend, match=r"unknown key\(s\) 'MAX_ATEMPTS'"),
    ):
        fw.task(backend="bad")(module_level_function)


# --- each caller gets its own family ------------------------------------------------------------


def test_each_framework_gets_a_backend_of_its_own_family():
    from .tasks_apps import tasks_module

    builtin = tasks_module("django.tasks")
    backport = tasks_module("django_tasks")
    import django.tasks
    import django_tasks

    assert django.tasks.default_task_backend.family.name == "django.tasks"
    assert django_tasks.default_task_backend.family.name == "django_tasks"
    assert isinstance(builtin.add, django.tasks.Task)
    assert isinstance(backport.add, django_tasks.base.Task)
    assert not isinstance(builtin.add, django_tasks.base.Task)
    # A result id asked of either framework comes back in that framework's classes.
    job_id = builtin.add.enqueue(1, 2).id
    assert type(django.tasks.default_task_backend.get_result(job_id)) is django.tasks.TaskResult
    assert type(django_tasks.default_task_backend.get_result(job_id)) is django_tasks.TaskResult
    with pytest.raises(django_tasks.exceptions.TaskResultDoesNotExist):
        django_tasks.default_task_backend.get_result("nope")


# --- checks and imports -------------------------------------------------------------------------


def test_backend_checks_refuse_a_missing_app_and_a_database_that_is_not_postgresql(
    tasks, monkeypatch
):
    from django_pqjobs.tasks import checks

    backend = tasks.add.get_backend()
    assert list(backend.check()) == []
    monkeypatch.setattr(checks.apps, "is_installed", lambda name: name != "django_pqjobs")
    monkeypatch.setitem(settings.DATABASES, "lite", {"ENGINE": "django.db.backends.sqlite3"})
    with override_settings(PQJOBS={"DATABASE": "lite"}):
        found = {message.id: message for message in backend.check()}
    assert set(found) == {"pqjobs.E080", "pqjobs.E081"}
    assert "'django_pqjobs' is not in INSTALLED_APPS" in found["pqjobs.E080"].msg
    assert "needs PostgreSQL" in found["pqjobs.E081"].msg
    assert found["pqjobs.E081"].obj == "settings.TASKS['default']"


def test_manage_py_check_reports_the_backend_without_django_pqjobs_installed():
    pytest.importorskip("django_tasks")  # the backport's app runs the backends' checks
    run = subprocess.run(
        [sys.executable, "-m", "django", "check"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings_tasks_without_app"},
        capture_output=True,
        text=True,
        timeout=bound(60),
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert "pqjobs.E080" in run.stderr
    assert "'django_pqjobs' is not in INSTALLED_APPS" in run.stderr


def test_django_pqjobs_without_tasks_imports_neither_framework():
    code = "\n".join(
        [
            "import sys, django",
            "django.setup()",
            "import django_pqjobs.tasks, django_pqjobs.admin, django_pqjobs.worker.worker",
            "from django.core.management import call_command",
            "call_command('check')",
            "names = [m.split('.') for m in sys.modules]",
            "loaded = [n for n in names if n[:2] == ['django', 'tasks'] or n[0] == 'django_tasks']",
            "print(loaded)",
            "sys.exit(1 if loaded else 0)",
        ]
    )
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT / "testproject",
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=bound(60),
    )
    assert run.returncode == 0, run.stdout + run.stderr
