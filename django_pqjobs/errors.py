"""Exceptions raised by handlers (to steer an outcome) and by the API (to refuse bad input)."""

from __future__ import annotations

from .durations import Duration, to_seconds


class PQJobsError(Exception):
    """Base class of every error django-pqjobs raises."""


class Retry(Exception):
    """Raise from a handler to retry the job.

    ``delay`` (a ``timedelta`` or seconds) overrides the backoff policy for this attempt;
    ``reason`` is stored as the attempt's error. The attempt still counts towards
    ``max_attempts``: when they are used up the job ends ``failed``.
    """

    def __init__(self, reason: str = "", *, delay: Duration | None = None) -> None:
        self.reason = reason
        self.delay: float | None = None if delay is None else to_seconds(delay, "Retry(delay=...)")
        super().__init__(reason or "retry requested")


class PermanentError(Exception):
    """Raise from a handler when retrying cannot help: the job ends ``failed`` at once."""


class JobTimeout(BaseException):
    """Raised inside a handler's thread when the job runs past its timeout.

    A ``BaseException`` so that a handler's ``except Exception`` cannot swallow it.
    """


class JobCancelled(BaseException):
    """Raised by ``ctx.raise_if_cancelled()`` when an operator asked to cancel the job."""


class PayloadError(PQJobsError, ValueError):
    """The payload cannot be stored: not JSON-serialisable, or larger than the limit."""


class DuplicateJob(PQJobsError):
    """An active job with the same ``(job_type, dedupe_key)`` exists (strategy ``error``)."""

    def __init__(self, job_type: str, dedupe_key: str, existing_id: int) -> None:
        self.job_type = job_type
        self.dedupe_key = dedupe_key
        self.existing_id = existing_id
        super().__init__(
            f"job type {job_type!r} already has an active job {existing_id} "
            f"with dedupe_key {dedupe_key!r}"
        )


class JobTypeAlreadyRegistered(PQJobsError):
    """Two handlers were registered under one job type name."""


class InvalidJobOption(PQJobsError, ValueError):
    """An option given to ``@job`` or ``enqueue_job`` has an invalid value."""


__all__ = [
    "DuplicateJob",
    "InvalidJobOption",
    "JobCancelled",
    "JobTimeout",
    "JobTypeAlreadyRegistered",
    "PQJobsError",
    "PayloadError",
    "PermanentError",
    "Retry",
]
