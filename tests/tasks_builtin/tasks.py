"""Tasks of an app that knows Django's built-in Tasks framework and nothing else: it never
imports django_pqjobs (a test checks). Mirrored by tests/tasks_backport/tasks.py."""

import asyncio
import os
import time

from django.tasks import TaskContext, task

from tests.testapp.models import Effect

FAMILY = "django.tasks"


@task
def noop(n: int = 0) -> None:
    """Does nothing: the benchmark's task (benchmarks/scenarios/tasks.py)."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="emails")
def record(key: str, payload: dict | None = None) -> dict:
    """Leaves an Effect row (proof that it ran) and returns what it was given."""
    Effect.objects.create(key=key)
    return {"key": key, "payload": payload}


@task
def record_with_time(key: str) -> float:
    Effect.objects.create(key=key)
    return time.time()


@task
def signalled(value: int) -> int:
    """Its framework's signals are recorded (see receivers.py)."""
    return value


@task
def boom(message: str) -> None:
    raise ValueError(message)


@task(backend="retrying")
def always_fails(message: str) -> None:
    """Its backend retries twice in all, half a second apart (see TASKS in settings)."""
    raise RuntimeError(message)


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0.01)
    return a + b


@task(takes_context=True)
def describe_context(context: TaskContext, label: str) -> dict:
    result = context.task_result
    return {
        "label": label,
        "attempt": context.attempt,
        "id": result.id,
        "status": str(result.status),
        "status_class": f"{type(result.status).__module__}.{type(result.status).__qualname__}",
        "args": result.args,
        "kwargs": result.kwargs,
        "worker_ids": result.worker_ids,
        "errors": len(result.errors),
    }


@task(takes_context=True, backend="retrying")
def fails_first_attempt(context: TaskContext) -> int:
    if context.attempt < 2:
        raise RuntimeError(f"not on attempt {context.attempt}")
    return context.attempt


@task(takes_context=True)
async def async_describe_context(context: TaskContext) -> dict:
    await asyncio.sleep(0)
    return {"attempt": context.attempt, "id": context.task_result.id}


@task
def returns_a_set() -> set:
    return {1, 2}


# django-pqjobs's options as @task keywords (Django 6.1+ passes them to the backend's task
# class): a hard timeout, and a process of its own.
@task(timeout=1, max_attempts=1)
def sleeps(seconds: float) -> None:
    time.sleep(seconds)


@task(isolation="process")
def pid_of_process() -> int:
    return os.getpid()


@task(isolation="process", max_attempts=1)
def sleeps_in_process(seconds: float) -> None:
    time.sleep(seconds)


@task
def batch_done(batch_id: int, key: str = "") -> int:
    """A batch's callback: leaves an Effect row naming the batch."""
    Effect.objects.create(key=f"{key}:{batch_id}")
    return batch_id
