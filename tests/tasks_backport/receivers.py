"""Receivers of django_tasks's signals: each leaves an Effect row, so a test can see which signal
was sent, for which result, in which process."""

import os

from django_tasks.signals import task_finished, task_started

from tests.testapp.models import Effect

# Only these tasks' signals are recorded (every task's would collide between tests).
RECORDED = {"signalled", "fails_first_attempt"}


def record(signal_name: str, sender: type, task_result, **kwargs) -> None:
    if task_result.task.name not in RECORDED:
        return
    Effect.objects.create(
        key=(
            f"django_tasks {signal_name} {task_result.id} {task_result.status} "
            f"{task_result.attempts} {sender.__name__} {type(task_result).__module__}"
        ),
        worker=str(os.getpid()),
    )


def on_started(sender: type, task_result, **kwargs) -> None:
    record("task_started", sender, task_result)


def on_finished(sender: type, task_result, **kwargs) -> None:
    record("task_finished", sender, task_result)


def connect() -> None:
    task_started.connect(on_started, dispatch_uid="tests.tasks_backport.started")
    task_finished.connect(on_finished, dispatch_uid="tests.tasks_backport.finished")
