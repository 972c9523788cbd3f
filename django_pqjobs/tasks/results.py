"""A job row as a ``TaskResult`` of the caller's family.

    ready → READY   running → RUNNING   done → SUCCESSFUL   failed, cancelled → FAILED

``errors`` is the job's failure history (one ``TaskError`` per failed attempt, oldest first;
a cancellation adds one that says so), ``worker_ids`` has one entry per attempt of the
current run (``attempts`` is its length), ``enqueued_at`` is when the job was created.
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from .. import errors as core_errors
from . import errors as task_errors
from . import payload

if TYPE_CHECKING:
    from ..models import Job
    from .families import Family

STATUS_NAMES = {
    "waiting": "READY",  # for its dependencies, or parked (a durable sleep or wait)
    "blocked": "READY",  # held back by flow control
    "ready": "READY",
    "running": "RUNNING",
    "done": "SUCCESSFUL",
    "failed": "FAILED",
    "cancelled": "FAILED",
    "expired": "FAILED",
}
FINISHED = ("done", "failed", "cancelled", "expired")
MISSING: Any = object()
# FailureKind values, as literals: this module is imported while apps may still be loading.
RELEASED = "released"
SNOOZED = "snoozed"
PARKED = "parked"
CANCELLED = "cancelled"

# error_type values the worker records by a bare name, and the classes they stand for.
_NAMED_ELSEWHERE = {
    "ResultNotSerializable": "django_pqjobs.verdicts.ResultNotSerializable",
    "ChildCrashed": "django_pqjobs.tasks.errors.ChildCrashed",
}


@dataclass(frozen=True)
class Attempt:
    """One row of a job's failure history."""

    attempt: int
    worker_id: str
    outcome: str
    error_type: str
    traceback: str
    started_at: datetime | None


def load_history(alias: str, job_id: int) -> list[Attempt]:
    from ..models import JobAttempt

    rows = (
        JobAttempt.objects.using(alias)
        .filter(job_id=job_id)
        .order_by("id")
        .values_list("attempt", "worker_id", "outcome", "error_type", "traceback", "started_at")
    )
    return [Attempt(*row) for row in rows]


def needs_history(job: Job, status: str | None = None) -> bool:
    """Whether the job has (or may have) a failure history worth a query."""
    return job.attempts > 1 or bool(job.last_error) or (status or job.status) in FINISHED[1:]


def exception_class_path(error_type: str) -> str:
    """The dotted path of the class an attempt's recorded ``error_type`` names.

    The worker records builtins and django-pqjobs's own exceptions by bare class name, other
    exceptions by dotted path, and failures that raised nothing by a name of their own.
    """
    name = error_type.split("(", 1)[0]
    if "." in name:
        return name
    if name in _NAMED_ELSEWHERE:
        return _NAMED_ELSEWHERE[name]
    found = getattr(builtins, name, None)
    if isinstance(found, type) and issubclass(found, BaseException):
        return f"builtins.{name}"
    # The names of failures that raised nothing first: "UnknownJobType" recorded by a worker
    # is no handler at claim time, not the enqueue-time error of the same name.
    for module in (task_errors, core_errors):
        found = getattr(module, name, None)
        if (
            isinstance(found, type)
            and issubclass(found, BaseException)
            and found.__module__ == module.__name__
        ):
            return f"{module.__name__}.{name}"
    return "builtins.Exception"


def build(
    family: Family,
    task: Any,
    job: Job,
    history: list[Attempt] | None,
    *,
    status: str | None = None,
    return_value: Any = MISSING,
    finished_at: datetime | None = None,
) -> Any:
    """The TaskResult of ``job`` with ``family``'s classes. ``history`` None means "no failed
    attempts". ``status``, ``return_value`` and ``finished_at`` override the object's when
    it is older than the outcome just recorded."""
    status = status or job.status
    # attempts given back (released, snoozed, parked) were not attempts of the task
    rows = [row for row in history or () if row.outcome not in (RELEASED, SNOOZED, PARKED)]
    alias, args, kwargs = payload.unpack(job.payload)
    result = family.task_result(
        task=task,
        id=str(job.id),
        status=family.status[STATUS_NAMES[status]],
        enqueued_at=job.created_at,
        started_at=_started_at(job, rows),
        finished_at=(finished_at or job.finished_at) if status in FINISHED else None,
        last_attempted_at=job.locked_at if job.attempts else None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=_errors(family, job, status, rows),
        worker_ids=_worker_ids(job, status, rows),
    )
    if status == "done":
        value = job.result if return_value is MISSING else return_value
        object.__setattr__(result, "_return_value", value)
    return result


# What TaskResult.refresh() updates in place (the same in both frameworks).
REFRESHED = (
    "status",
    "enqueued_at",
    "started_at",
    "finished_at",
    "last_attempted_at",
    "errors",
    "worker_ids",
    "_return_value",
)


def update(target: Any, source: Any) -> None:
    """Bring ``target`` (a TaskResult someone may hold) up to date with ``source``."""
    for name in REFRESHED:
        object.__setattr__(target, name, getattr(source, name))


def mark_successful(family: Family, result: Any, return_value: Any, finished_at: datetime) -> None:
    """A RUNNING result of an attempt that just succeeded, updated in place."""
    object.__setattr__(result, "status", family.status.SUCCESSFUL)
    object.__setattr__(result, "finished_at", finished_at)
    object.__setattr__(result, "_return_value", return_value)


def enqueued(
    family: Family, task: Any, job_id: int, args: list[Any], kwargs: dict[str, Any], alias: str
) -> Any:
    """The TaskResult ``enqueue()`` returns: READY, nothing attempted yet."""
    return family.task_result(
        task=task,
        id=str(job_id),
        status=family.status.READY,
        enqueued_at=timezone.now(),
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=args,
        kwargs=kwargs,
        backend=alias,
        errors=[],
        worker_ids=[],
    )


def _started_at(job: Job, rows: list[Attempt]) -> datetime | None:
    moments = [row.started_at for row in rows if row.started_at is not None]
    if job.attempts and job.locked_at is not None:
        moments.append(job.locked_at)
    return min(moments) if moments else None


def _worker_ids(job: Job, status: str, rows: list[Attempt]) -> list[str]:
    """One worker id per attempt of the current run. After an operator's retry the attempt
    count starts again; the newest history row of each attempt number is that run's."""
    by_attempt = {row.attempt: row.worker_id for row in rows}
    current_is_open = status in ("running", "done")
    ids = []
    for number in range(1, job.attempts + 1):
        if number == job.attempts and current_is_open:
            ids.append(job.locked_by or "")
        else:
            ids.append(by_attempt.get(number, ""))
    return ids


def _errors(family: Family, job: Job, status: str, rows: list[Attempt]) -> list[Any]:
    errors = [
        family.task_error(
            exception_class_path=exception_class_path(row.error_type), traceback=row.traceback
        )
        for row in rows
    ]
    if status == "cancelled" and (not rows or rows[-1].outcome != CANCELLED):
        errors.append(
            family.task_error(
                exception_class_path="django_pqjobs.errors.JobCancelled",
                traceback=job.last_error or "the job was cancelled before it ran",
            )
        )
    elif status == "expired":
        errors.append(
            family.task_error(
                exception_class_path="django_pqjobs.errors.JobExpired",
                traceback=job.last_error or "the deadline passed before the task could start",
            )
        )
    elif status == "failed" and not rows:
        errors.append(
            family.task_error(
                exception_class_path=exception_class_path(job.error_type or "Exception"),
                traceback=job.last_error,
            )
        )
    return errors
