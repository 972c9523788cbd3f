"""The audit trail: who did which operator action, when, to what (table ``pqjobs_audit``).

Every operator action of the admin (Retry, Cancel, Run now, Release, Delete, Pause, Resume,
a schedule's Enable, Disable and Run now) is recorded here, in the transaction of the change
it describes, so a change is never without its row nor a row without its change. From code,
``retry_job``, ``cancel_job`` and the ``flow`` functions record their action when given
``by=``. Rows name jobs by id, without a foreign key: they outlive the jobs (pruned or
deleted) and are pruned on their own retention, ``PQJOBS['AUDIT_RETENTION']``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import ProgrammingError, connections

from . import options
from .sql import queries
from .statuses import AuditAction

QUERIES = queries("audit")

__all__ = [
    "AuditAction",
    "AuditNotWritable",
    "Event",
    "JobAction",
    "job_events",
    "may_prune",
    "prune",
    "record",
    "record_jobs",
]

# The job page shows a job's latest events (a job retried a thousand times must not make a
# page of a thousand rows).
SHOWN_EVENTS = 50
DETAIL_MAX_CHARS = 2000


class AuditNotWritable(PermissionError):
    """This database role may not add to the audit trail.

    Raised by an operator action (with ``by=``) whose row the database refused: the change
    it describes is rolled back with it, since an action is never done without its row.
    """


@contextmanager
def _writing() -> Iterator[None]:
    try:
        yield
    except ProgrammingError as exc:
        if getattr(exc.__cause__, "sqlstate", None) != "42501":  # insufficient_privilege
            raise
        raise AuditNotWritable(
            "this database role may not add to the audit trail (INSERT on pqjobs_audit), so "
            "it may not do operator actions: use a role with the admin grants "
            "(docs/guides/reliability.md, the trust boundary)"
        ) from exc


@dataclass(frozen=True)
class JobAction:
    """One job an action changed, and what it did to that job. ``job_type`` None: read it
    from the job's row (a deleted job's must be given)."""

    job_id: int
    job_type: str | None
    detail: str


def record_jobs(alias: str, action: AuditAction, by: str, changed: Sequence[JobAction]) -> None:
    """One row per job an action changed (one statement). Call it inside the transaction
    of the change."""
    if not changed:
        return
    actor = options.actor(by)
    with _writing(), connections[alias].cursor() as cursor:
        cursor.execute(
            QUERIES["record_jobs"],
            [
                actor,
                str(action),
                [c.job_id for c in changed],
                [c.job_type for c in changed],
                [c.detail[:DETAIL_MAX_CHARS] for c in changed],
            ],
        )


def record(
    alias: str,
    action: AuditAction,
    by: str,
    *,
    target: str = "",
    detail: str = "",
    schedule_id: int | None = None,
) -> None:
    """One row for an action on something other than a job: a queue or job type paused or
    resumed, a schedule enabled, disabled or run now."""
    actor = options.actor(by)
    with _writing(), connections[alias].cursor() as cursor:
        cursor.execute(
            QUERIES["record"],
            [actor, str(action), schedule_id, target, detail[:DETAIL_MAX_CHARS]],
        )


@dataclass(frozen=True)
class Event:
    """A row of the audit trail as the job page's timeline shows it."""

    at: datetime
    actor: str
    action: str
    detail: str

    @property
    def verb(self) -> str:
        """``retried``, ``run now``, ``released``... as in "retried by alice"."""
        return _VERBS.get(self.action, self.action)


_VERBS: dict[str, str] = {
    AuditAction.RETRY: "retried",
    AuditAction.CANCEL: "cancelled",
    AuditAction.RUN_NOW: "run now",
    AuditAction.RELEASE: "released",
    AuditAction.DELETE: "deleted",
}


def job_events(alias: str, job_id: int, limit: int = SHOWN_EVENTS) -> list[Event]:
    """The latest ``limit`` operator actions on a job, oldest first (index
    ``pqjobs_audit_job``)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            QUERIES["job_events"],
            [job_id, limit],
        )
        rows: list[Any] = cursor.fetchall()
    return [Event(*row) for row in reversed(rows)]


_PRUNE = QUERIES["prune"]


def may_prune(alias: str) -> bool:
    """Whether this connection's role may delete from the audit trail.

    The worker role of the least-privilege setup may not (nor may the admin role): the
    audit trail is then pruned by ``prune_jobs`` run as the tables' owner.
    """
    with connections[alias].cursor() as cursor:
        cursor.execute(QUERIES["may_prune"])
        return bool(cursor.fetchone()[0])


def prune(
    alias: str, retention: float | None, batch: int = 5000, max_batches: int = 1000
) -> int | None:
    """Delete rows older than ``retention`` seconds (None: keep them), in short batches.

    Returns how many, or None when the connection's role may not delete audit rows.
    """
    if retention is None:
        return 0
    if not may_prune(alias):
        return None
    deleted = 0
    for _ in range(max_batches):
        with connections[alias].cursor() as cursor:
            cursor.execute(_PRUNE, [float(retention), batch])
            count = int(cursor.rowcount)
        deleted += count
        if count < batch:
            break
    return deleted
