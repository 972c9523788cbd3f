"""Flow control from Python: pause and resume queues and job types, and see what is held.

Limits and rates are declared on the job type (``@job(concurrency=..., rate=...)``) and in
``PQJOBS['QUEUE_RATES']``; the claim statement applies them (``transitions.claim``). This
module is the operator's side: pausing, resuming, and a summary for the admin.
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from datetime import datetime

from django.db import connections, transaction

from . import audit, keys, monitoring, options, transitions
from .audit import AuditAction
from .conf import conf
from .printable import counted
from .registry import registry
from .sql import queries
from .tasks import activation
from .tasks.errors import TaskNotLoadable
from .tasks.loader import configured_queues, load_task

QUERIES = queries("flow_control")


@dataclass(frozen=True)
class Paused:
    kind: str  # "queue" or "job_type"
    name: str
    paused_at: datetime
    paused_by: str


def pause_queue(name: str, *, by: str = "", using: str | None = None) -> bool:
    """Stop every worker from starting jobs of queue ``name``, from this call's commit on.

    Running jobs finish; waiting jobs stay, held (status ``blocked``, by ``paused``), as do
    jobs enqueued into the queue while it is paused. Stored in the database, so it survives
    worker restarts. Returns False if the queue was paused already. ``by`` (who pauses) is shown
    with the pause and, when given, recorded in the audit trail.
    """
    return _pause("queue", options.queue_name(name), by, using)


def resume_queue(name: str, *, by: str = "", using: str | None = None) -> int | None:
    """Let workers start jobs of queue ``name`` again. Returns how many held jobs were
    released, or None if the queue was not paused. ``by``: as for :func:`pause_queue`."""
    return _resume("queue", options.queue_name(name), by, using)


def pause_job_type(name: str, *, by: str = "", using: str | None = None) -> bool:
    """Like :func:`pause_queue`, for one job type in every queue."""
    return _pause("job_type", options.job_type_name(name), by, using)


def resume_job_type(name: str, *, by: str = "", using: str | None = None) -> int | None:
    """Like :func:`resume_queue`, for one job type."""
    return _resume("job_type", options.job_type_name(name), by, using)


def known_queues() -> set[str]:
    """The queues the configuration names: ``DEFAULT_QUEUE``, ``QUEUES``, the job types' and
    the declared schedules' queues, and the ``QUEUES`` of this library's ``TASKS`` backends.
    Read from the code and settings only (no index on the queue column: no scan for its
    values). Raises ValueError when ``DEFAULT_QUEUE`` or ``QUEUES`` is invalid."""
    known = {conf.DEFAULT_QUEUE, *(conf.QUEUES or [])}
    job_types = registry.all()
    known.update(job_type.queue for job_type in job_types if job_type.queue)
    specs = [job_type.schedule for job_type in job_types if job_type.schedule is not None]
    with contextlib.suppress(ValueError):  # a broken PQJOBS['SCHEDULES']: check E040 says so
        specs.extend(conf.SCHEDULES)
    known.update(spec.queue for spec in specs if spec.queue)
    known.update(configured_queues())
    return known


def undeclared(kind: str, name: str, using: str | None = None) -> str | None:
    """Why the queue or job type ``name`` looks like a typo, with the closest known name;
    None when the configuration names it or jobs of it exist (a queue: active jobs, read as
    the metrics read them; a job type: any job, through its index).

    Pausing such a name still works (jobs enqueued under it by name wait); this is for a
    warning, in ``pause_jobs``, ``resume_jobs`` and the admin. ``kind`` is ``"queue"`` or
    ``"job_type"``.
    """
    if kind == "queue":
        try:
            known = known_queues()
        except ValueError:
            return None  # a broken setting: the system checks say which
        if name in known:
            return None
        active = {row.queue for row in monitoring.depth(using) if row.status != "failed"}
        if name in active:
            return None
        known |= active
        what = (
            f"the queue {name!r} is named by no job type, schedule, DEFAULT_QUEUE, QUEUES or "
            "TASKS backend, and holds no job"
        )
    else:
        if name in registry or _is_task(name) or _has_jobs(name, using):
            return None
        known = set(registry.names())
        what = f"the job type {name!r} is declared by no @job or @task, and no job has it"
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return what + (f"; did you mean {close[0]!r}?" if close else "")


def _is_task(name: str) -> bool:
    """Whether ``name`` is the path of a task this library's Tasks backend runs."""
    if not activation.backends():
        return False
    try:
        load_task(name)
    except TaskNotLoadable:
        return False
    return True


def _has_jobs(job_type: str, using: str | None) -> bool:
    with connections[using or conf.DATABASE].cursor() as cursor:
        cursor.execute(QUERIES["has_jobs"], [job_type])
        (found,) = cursor.fetchone()
    return bool(found)


def _pause(kind: str, name: str, by: str, using: str | None) -> bool:
    alias = using or conf.DATABASE
    actor = options.actor(by) if by else ""
    with transaction.atomic(using=alias):
        done = transitions.pause(alias, kind, name, actor)
        if done and actor:
            audit.record(alias, AuditAction.PAUSE, actor, target=_target(kind, name))
    return done


def _resume(kind: str, name: str, by: str, using: str | None) -> int | None:
    alias = using or conf.DATABASE
    actor = options.actor(by) if by else ""
    with transaction.atomic(using=alias):
        released = transitions.resume(alias, kind, name)
        if released is not None and actor:
            detail = f"{counted(released, 'held job')} released"
            target = _target(kind, name)
            audit.record(alias, AuditAction.RESUME, actor, target=target, detail=detail)
    return released


def _target(kind: str, name: str) -> str:
    return f"{'queue' if kind == 'queue' else 'job type'} {name}"[: options.NAME_MAX_LENGTH]


def paused(using: str | None = None) -> list[Paused]:
    """Every paused queue and job type."""
    with connections[using or conf.DATABASE].cursor() as cursor:
        cursor.execute(QUERIES["paused"])
        return [Paused(*row) for row in cursor.fetchall()]


@dataclass(frozen=True)
class Held:
    """Jobs held back now, by what holds them: ``blocked_by`` and the key or queue."""

    blocked_by: str
    key: str
    jobs: int


_HELD = QUERIES["held"]


def held(limit: int = 50, using: str | None = None) -> list[Held]:
    """The keys, rate buckets and paused queues that hold the most jobs back."""
    with connections[using or conf.DATABASE].cursor() as cursor:
        cursor.execute(_HELD, [limit])
        return [Held(str(r[0]), str(r[1]), int(r[2])) for r in cursor.fetchall()]


@dataclass(frozen=True)
class Declared:
    """A job type's flow-control declaration, for the admin."""

    job_type: str
    concurrency: int | None
    concurrency_key: str
    rate: str
    rate_key: str
    max_waiting: int | None


def declared() -> list[Declared]:
    """Every registered job type that declares a concurrency limit or a rate."""
    found = []
    for job_type in registry.all():
        if job_type.concurrency is None and job_type.rate is None:
            continue
        found.append(
            Declared(
                job_type.name,
                job_type.concurrency,
                _describe_key(job_type.concurrency_key, job_type.name),
                "" if job_type.rate is None else str(job_type.rate),
                _describe_key(job_type.rate_key, f"type:{job_type.name}") if job_type.rate else "",
                job_type.max_waiting,
            )
        )
    return found


def _describe_key(template: keys.KeyTemplate | None, default: str) -> str:
    if template is None:
        return default
    if callable(template):
        return f"{template.__module__}.{getattr(template, '__qualname__', repr(template))}()"
    return template
