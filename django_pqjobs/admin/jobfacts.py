"""What the job list and the job page read about a job besides its row, kept on the job for
the page's fields: why it waits, its children, the liveness of its worker, the pauses an
expired job met, whether the user may act on it, and the :class:`firstscreen.Facts` that
decide the page's rows (:func:`attach_facts`, read once by ``JobPage.get_object``); and the
short notes both the list and the page say of a worker and of a waiting job."""

from __future__ import annotations

from typing import Any

from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import flow, monitoring
from ..models import Job
from ..registry import registry
from . import excerpts, firstscreen, reasons

FACTS = "_pqjobs_facts"
REASONS = "_pqjobs_reasons"
CHILDREN = "_pqjobs_children"
WORKER = "_pqjobs_worker"
PAUSES = "_pqjobs_pauses"
CAN_ACT = "_pqjobs_can_act"  # the user may Retry, Cancel, Release... it
CHILDREN_SHOWN = 20


def _has_error(job: Any) -> bool:
    """Whether the job's row records an error (its last attempt's, or why it expired)."""
    if not isinstance(job, Job):
        return False
    error = excerpts.page_of(job).last_error
    return bool(job.error_type or (error is not None and error.length))


def attach_facts(job: Job, alias: str, composed: list[str]) -> None:
    """Read what the job page shows besides the job's row (why it waits, its children, the
    liveness of its worker, the pauses an expired job met) and what decides its rows."""
    page = excerpts.page_of(job)
    why = reasons.why(job, alias)
    setattr(job, REASONS, why)
    # Served by the partial index on parent_id (pqjobs_job_parent); children are
    # enqueued after their parent, so only ids above it are looked at.
    children = list(
        Job.objects.using(alias)
        .filter(parent_id=job.pk, pk__gt=job.pk)
        .order_by("pk")
        .values_list("pk", flat=True)[:CHILDREN_SHOWN]
    )
    setattr(job, CHILDREN, children)
    worker = None
    if job.status == "running" and job.locked_by:
        seen = firstscreen.workers_seen(alias, [job.locked_by], monitoring.live_after())
        worker = seen.get(job.locked_by)
        setattr(job, WORKER, worker)
    if job.status == "expired":
        setattr(job, PAUSES, flow.paused(alias))
    failures = [a for a in page.attempts if a.outcome not in firstscreen.NOT_FAILURES]
    error = page.last_error
    # A one-line last error (why a job expired, a timeout) has no traceback to show.
    multi_line = error is not None and (error.cut > 0 or "\n" in error.text.strip())
    has_traceback = bool(
        (multi_line and not page.attempts)
        or any(getattr(a, "traceback_length", 0) for a in failures)
    )
    known = registry.resolve(job.job_type)
    current = (known.version or 1) if known is not None else None
    setattr(
        job,
        FACTS,
        firstscreen.Facts(
            shows_data=page.show_data,
            has_error=_has_error(job),
            has_traceback=has_traceback,
            has_steps=page.has_steps,
            has_payload=page.payload is not None,
            has_result=page.result is not None,
            has_progress=page.progress is not None,
            waits_because=bool(why),
            has_related=bool(job.parent_id or job.schedule_id or children),
            attempts=page.attempts_total,
            failures=len(failures),
            payload_upgrade=current is not None and (job.payload_version or 1) != current,
            composed=composed,
            worker=worker,
        ),
    )


def facts_of(job: Job) -> firstscreen.Facts:
    """The :class:`firstscreen.Facts` the job page read (defaults if none were read)."""
    facts = getattr(job, FACTS, None)
    return facts if isinstance(facts, firstscreen.Facts) else firstscreen.Facts()


def worker_note(worker: firstscreen.WorkerSeen | None) -> SafeString | str:
    """``stale for 80 s (last heartbeat 95 s ago)``: a running job's worker, when it is not
    live ("" when it is, or was not looked at)."""
    if worker is None or worker.live:
        return ""
    if worker.heartbeat_age is None:
        return format_html('<span class="pqjobs-stale-worker">{}</span>', "worker gone")
    return format_html(
        '<span class="pqjobs-stale-worker">worker stale for {} s</span>',
        f"{worker.stale_for or 0:.0f}",
    )


def waiting_for(count: int) -> str:
    if count == 0:
        return "parked: a workflow's durable sleep or wait for a signal"
    return f"waiting for {count} {'dependency' if count == 1 else 'dependencies'}"
