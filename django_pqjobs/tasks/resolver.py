"""The registry resolver: the job type of a task whose module this process has not imported.

A worker only meets a task's job type before its module was imported when nothing in the
worker imported that module (tasks need no autodiscovery). For such a name the resolver
loads the task — but only when a running job of that type really is a task job (its payload
is a task call), and only through :func:`loader.load_task`, which imports nothing outside
the installed apps and accepts nothing but a Task of this backend. Anything else gets a job
type whose handler fails the job at once with the reason; the object found is never called.
"""

from __future__ import annotations

from django.db import connections

from ..conf import conf
from ..registry import JobType, registry
from ..sql import queries
from . import loader, payload
from .errors import TaskNotLoadable

_RUNNING_TASK_JOB = queries("tasks_resolver")["running_task_job"].replace(
    "{backend_key}", payload.BACKEND_KEY
)


def resolve(name: str) -> JobType | None:
    """A job type for ``name`` if it is a task job's, else None (see the module docstring)."""
    if loader.split_path(name) is None or not _is_running_task_job(name):
        return None
    try:
        task = loader.load_task(name)
    except TaskNotLoadable as exc:
        return failing_job_type(name, str(exc))
    found = registry.get(name)
    if found is not None:
        return found
    # The task was created before this registry forgot it (or by hand): let its backend
    # register it again.
    backend = task.get_backend()
    try:
        backend.validate_task(task)
    except Exception as exc:
        return failing_job_type(name, f"task {name!r} is not valid for its backend: {exc}")
    return registry.get(name)


def _is_running_task_job(name: str) -> bool:
    with connections[conf.DATABASE].cursor() as cursor:
        cursor.execute(_RUNNING_TASK_JOB, [name])
        row = cursor.fetchone()
    return bool(row and row[0])


def failing_job_type(name: str, reason: str) -> JobType:
    """A job type whose every job fails at once with ``reason`` (no retries)."""

    def fail(ctx: object) -> None:
        raise TaskNotLoadable(reason)

    module, _, attribute = name.rpartition(".")
    fail.__module__ = module
    fail.__qualname__ = attribute
    return JobType(name=name, handler=fail, max_attempts=1)
