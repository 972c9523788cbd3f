"""What a job's page shows, and in which order, so that its first screen answers its status.

:func:`plan` is one pure function from a job and the few facts the page read about it
(:class:`Facts`) to the page's sections (Django fieldsets): only the rows that apply (no row
of "-"), and first what the job's status asks about —

* failed: the error, then the payload and the attempt history;
* running: which worker runs it and whether that worker is live (a stale one says for how
  long, its heartbeat's age, and offers Release);
* a waiting durable workflow: its steps, sleeps and waits;
* expired: why (its deadline, and what held it back meanwhile);
* waiting, ready or blocked: why it waits.

:func:`workers_seen` is the one query of workers behind the job page's and the job list's
liveness: the workers named, by primary key, with their heartbeat's age.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import connections

from ..models import Job
from ..sql import queries
from ..statuses import FINISHED_STATUSES

QUERIES = queries("admin_firstscreen")

# Attempt outcomes that end an attempt without an error: the handler parked the job (a
# durable sleep or a wait for a signal) or snoozed it. They have no traceback.
NOT_FAILURES = frozenset({"parked", "snoozed"})


@dataclass(frozen=True)
class WorkerSeen:
    """A worker as the page saw it: how old its record's heartbeat is (``None``: it has no
    record, it stopped or was rescued), and the age past which it is not live."""

    worker_id: str
    heartbeat_age: float | None
    live_after: float

    @property
    def live(self) -> bool:
        return self.heartbeat_age is not None and self.heartbeat_age <= self.live_after

    @property
    def stale_for(self) -> float | None:
        """Seconds since it stopped counting as live (``None``: live, or no record)."""
        if self.heartbeat_age is None or self.live:
            return None
        return self.heartbeat_age - self.live_after


@dataclass(frozen=True)
class Facts:
    """What the job page read about a job besides its row, for :func:`plan`."""

    shows_data: bool = True  # the payload, result and errors (ADMIN_DATA_PERMISSION)
    has_error: bool = False  # a last error recorded on the job's row
    has_traceback: bool = False  # the last error, or an attempt's, has a traceback
    has_steps: bool = False  # a durable workflow's steps
    has_payload: bool = True
    has_result: bool = False
    has_progress: bool = False
    waits_because: bool = False  # "why it waits" has a reason
    has_related: bool = False  # a parent, children or a schedule
    attempts: int = 0  # rows in its attempt history
    failures: int = 0  # of them, attempts that failed (not parks nor snoozes)
    payload_upgrade: bool = False  # its payload version differs from its type's
    composed: list[str] = field(default_factory=list)  # batch and dependency rows
    worker: WorkerSeen | None = None  # of a running job


Fieldsets = list[tuple[str | None, dict[str, list[str]]]]


def error_field(job: Job, facts: Facts) -> str | None:
    """The row the job's last error takes on the first screen, if any: a finished job's
    "last error"; a job waiting for its next try, its "previous attempt's error". A
    running or done job shows none there (its attempt history keeps the old errors): the
    page tells one moment."""
    if not facts.has_error or job.status in ("done", "running"):
        return None
    if job.status == "expired":
        return "expiry"
    if job.status in FINISHED_STATUSES:
        return "last_error_summary"
    return "previous_error"


def summary_rows(job: Job, facts: Facts) -> list[str]:
    """The first section's rows: the status, what it asks about, then what identifies the
    job; each only when it applies."""
    rows = ["status_detail"]
    if job.status == "running" and job.locked_by:
        rows.append("worker_state")
    error = error_field(job, facts)
    if job.status == "expired" and error is None:
        error = "expiry"
    if error:
        rows.append(error)
    if facts.waits_because:
        rows.append("why_waiting")
    rows += ["job_type", "queue"]
    if job.priority:
        rows.append("priority")
    rows.append("tries")
    if job.dedupe_key:
        rows += ["dedupe_key", "key_held"]
    if job.sequence_key:
        rows.append("sequence")
    if job.fair_key:
        rows.append("fair")
    if facts.has_related:
        rows.append("links")
    return rows


def timing_rows(job: Job) -> list[str]:
    """The Timing section's rows that have a value."""
    present = {
        "created": True,
        "due": job.status not in FINISHED_STATUSES,
        "deadline": job.expires_at is not None,
        "claimed": job.locked_at is not None,
        "worker": bool(job.locked_by),
        "heartbeat": job.status == "running" and job.heartbeat_at is not None,
        "finished": job.finished_at is not None,
        "duration": job.duration_ms is not None,
        "timeout_seconds": job.timeout_seconds is not None,
        "cancel_requested": job.cancel_requested_at is not None,
    }
    return [name for name, shown in present.items() if shown]


def plan(job: Job, facts: Facts) -> Fieldsets:
    """The job page's sections in order, each with only the rows that apply."""
    data: list[str] = []
    if facts.shows_data:
        if facts.has_payload:
            data.append("payload_pretty")
        if facts.payload_upgrade:
            data.append("payload_shape")
        if facts.has_result:
            data.append("result_pretty")
    else:
        data.append("data_hidden")
    if facts.has_progress:
        data.append("progress_bar")
    sections: dict[str, Fieldsets] = {
        "workflow": [("Workflow", {"fields": ["workflow_steps"]})] if facts.has_steps else [],
        "composition": (
            [("Batch and dependencies", {"fields": list(facts.composed)})] if facts.composed else []
        ),
        "data": [("Payload and result", {"fields": data})] if data else [],
        "attempts": (
            [("Attempt history", {"fields": ["attempt_table"]})] if facts.attempts else []
        ),
        "tracebacks": (
            [("Tracebacks", {"fields": ["tracebacks"]})]
            if facts.shows_data and facts.has_traceback
            else []
        ),
        "timing": [("Timing", {"fields": timing_rows(job)})],
        "timeline": [("Timeline", {"fields": ["timeline"]})],
    }
    if job.status == "failed":
        order = ["data", "attempts", "composition", "workflow", "timeline", "timing"]
    elif job.status == "waiting" and facts.has_steps:
        order = ["workflow", "composition", "data", "timeline", "timing", "attempts"]
    elif job.status == "running":
        order = ["workflow", "data", "timing", "timeline", "composition", "attempts"]
    else:
        order = ["composition", "workflow", "data", "timeline", "timing", "attempts"]
    order.append("tracebacks")
    fieldsets: Fieldsets = [(None, {"fields": summary_rows(job, facts)})]
    for name in order:
        fieldsets += sections[name]
    return fieldsets


def workers_seen(alias: str, worker_ids: Iterable[str], live_after: float) -> dict[str, WorkerSeen]:
    """The workers ``worker_ids`` (one query, by primary key), each with its record's
    heartbeat age by the database's clock; a worker without a record is in it with
    ``heartbeat_age=None``."""
    ids = sorted({w for w in worker_ids if w})
    if not ids:
        return {}
    with connections[alias].cursor() as cursor:
        cursor.execute(
            QUERIES["workers_seen"],
            [ids],
        )
        ages = {worker_id: float(age) for worker_id, age in cursor.fetchall()}
    return {w: WorkerSeen(w, ages.get(w), live_after) for w in ids}
