"""A job's timeline: its life (created, attempts, outcome) and what operators did to it.

Attempts come from the attempt history (the latest ones the job page read), operator
actions from the audit trail ("retried by alice"); both carry the database's clock, so they
sort into one story. Attempt numbers go on across retries, so each appears once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..audit import Event
from ..models import Job
from . import display
from .excerpts import JobPage


@dataclass(frozen=True)
class Entry:
    at: datetime
    what: str
    detail: str
    operator: bool = False  # an operator's action (shown apart from the job's own events)


def entries(job: Job, page: JobPage, events: list[Event]) -> list[Entry]:
    """Everything that happened to ``job``, oldest first."""
    found = [Entry(job.created_at, "created", f"queue {job.queue}")]
    for attempt in page.attempts:
        if attempt.started_at is not None:
            found.append(
                Entry(attempt.started_at, f"attempt {attempt.attempt} started", attempt.worker_id)
            )
        summary = display.first_line(getattr(attempt, "traceback_tail", ""))
        found.append(
            Entry(attempt.finished_at, f"attempt {attempt.attempt}: {attempt.outcome}", summary)
        )
    for event in events:
        found.append(Entry(event.at, f"{event.verb} by {event.actor}", event.detail, True))
    # The current attempt has no history row unless it failed.
    recorded = {a.attempt for a in page.attempts}
    if job.locked_at is not None and job.attempts not in recorded:
        if job.status == "running":
            found.append(
                Entry(
                    job.locked_at, f"attempt {job.attempts} started (running)", job.locked_by or ""
                )
            )
        elif job.status == "done":
            found.append(
                Entry(job.locked_at, f"attempt {job.attempts} started", job.locked_by or "")
            )
    if job.finished_at is not None:
        detail = display.duration(job.duration_ms) if job.status == "done" else ""
        found.append(Entry(job.finished_at, job.status, detail))
    return sorted((e for e in found if e.at is not None), key=lambda e: e.at)
