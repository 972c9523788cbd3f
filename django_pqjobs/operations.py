"""Operator actions callable from code (the admin uses the same transitions)."""

from __future__ import annotations

from .conf import conf


def cancel_job(job_id: int, *, using: str | None = None) -> str | None:
    """Cancel a job: a ready job becomes ``cancelled`` at once; a running job gets a cancel
    request its handler sees as ``ctx.cancelled`` (within one heartbeat).

    Returns ``"cancelled"``, ``"cancel_requested"``, or None if the job is already finished
    or does not exist.
    """
    from .worker import queries

    return queries.cancel(using or conf.DATABASE, job_id)


def retry_job(job_id: int, *, using: str | None = None) -> bool:
    """Put a ``failed`` or ``cancelled`` job back to ``ready`` now, with its attempts reset.

    Its failure history is kept. Returns False when the job is in another status.
    """
    from .worker import queries

    return queries.requeue(using or conf.DATABASE, job_id)
