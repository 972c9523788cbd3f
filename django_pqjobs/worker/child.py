"""The child side of process isolation.

The fork server imports this module, so Django is set up once there and every forked child
starts with the project's apps and handlers already loaded (and no database connection).
"""

from __future__ import annotations

import asyncio
import json
import os
import traceback
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import django
from django.apps import apps

from ..errors import JobCancelled, PermanentError, Retry
from .isolation import ChildReport

if TYPE_CHECKING:
    from ..models import Job

if not apps.ready and os.environ.get("DJANGO_SETTINGS_MODULE"):
    django.setup()


def child_main(
    pipe: Connection,
    fields: dict[str, Any],
    worker_id: str,
    alias: str,
    database_name: str,
    memory_limit: int | None,
) -> None:
    """Run one job and send a :class:`~.isolation.ChildReport` back through ``pipe``.

    ``database_name`` is the worker's: the same as in settings, except under a test runner
    that renamed the database after the fork server read the settings.
    """
    if not apps.ready:
        django.setup()
    from django.db import connections

    connections[alias].settings_dict["NAME"] = database_name

    from ..context import JobContext
    from ..models import Job
    from . import hooks

    if memory_limit:
        import resource

        # RLIMIT_DATA (heap and anonymous mappings), not RLIMIT_AS: the address space of a
        # process with Django loaded is already hundreds of MB of mapped libraries.
        resource.setrlimit(resource.RLIMIT_DATA, (memory_limit, memory_limit))
    job = Job(status="running", **fields)
    ctx = JobContext(job=job, worker_id=worker_id, attempt=job.attempts, using=alias)
    error: BaseException | None = None
    try:
        result = _run(job, ctx)
    except BaseException as exc:
        error = exc
        report = _failure_report(exc)
    else:
        report = _result_report(job, result, ctx._pending_progress)
    hooks.post_execute(job, error)
    connections.close_all()
    pipe.send(report)
    pipe.close()


def _run(job: Job, ctx: Any) -> Any:
    from ..registry import registry
    from . import hooks

    job_type = registry.get(job.job_type)
    if job_type is None:
        raise PermanentError(f"no handler registered for '{job.job_type}'")
    hooks.pre_execute(job)
    result = job_type.handler(ctx)
    if asyncio.iscoroutine(result):
        result = asyncio.run(result)
    return result


def _result_report(job: Job, result: Any, progress: dict[str, Any] | None) -> ChildReport:
    from django.core.serializers.json import DjangoJSONEncoder

    if result is None:
        return ChildReport("done", progress=progress)
    try:
        return ChildReport(
            "done",
            result_json=json.dumps(result, cls=DjangoJSONEncoder, allow_nan=False),
            progress=progress,
        )
    except (TypeError, ValueError, RecursionError):
        return ChildReport(
            "permanent",
            error_type="ResultNotSerializable",
            traceback=(
                f"job type {job.job_type!r} returned a value that is not JSON-serialisable: "
                f"{type(result).__name__} {result!r:.200}"
            ),
        )


def _failure_report(exc: BaseException) -> ChildReport:
    from .executor import error_type_name

    text = "".join(traceback.format_exception(exc))
    if isinstance(exc, Retry):
        reason = exc.reason or "retry requested"
        return ChildReport(
            "retry", error_type="Retry", traceback=f"{reason}\n\n{text}", delay=exc.delay
        )
    if isinstance(exc, PermanentError):
        return ChildReport("permanent", error_type=error_type_name(exc), traceback=text)
    if isinstance(exc, JobCancelled):
        return ChildReport("cancelled", error_type="JobCancelled", traceback=text)
    return ChildReport("error", error_type=error_type_name(exc), traceback=text)
