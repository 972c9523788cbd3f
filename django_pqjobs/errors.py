"""Exceptions raised by handlers (to steer the verdict) and by the API (to refuse bad input)."""

from __future__ import annotations

import re
from collections.abc import Mapping

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


class Snooze(Exception):
    """Raise from a handler to run the job again later, without charging the attempt.

    The job goes back to ``ready``, due after ``delay`` (a ``timedelta`` or seconds, 0 or
    more); ``attempts`` does not grow, and the attempt history records a ``snoozed`` row
    (``reason``, if given, as its note). A job may snooze ``PQJOBS["SNOOZE_LIMIT"]`` times
    in a row; the snooze after that fails it for good (error type ``SnoozeLimit``), so a
    job cannot snooze for ever. Unlike :class:`Retry`, whose attempt counts towards
    ``max_attempts``.
    """

    def __init__(self, delay: Duration, reason: str = "") -> None:
        self.delay: float = to_seconds(delay, "Snooze(delay)", allow_zero=True)
        self.reason = reason
        super().__init__(reason or f"snoozed for {self.delay:g} s")


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
    """An active job with the same ``(job_type, dedupe_key)`` exists (strategy ``error``).

    ``duplicates`` maps each duplicate key to the id of its active job: one for
    ``enqueue_job``, every one found for ``enqueue_many``. ``dedupe_key`` and
    ``existing_id`` are the first of them.
    """

    def __init__(
        self,
        job_type: str,
        dedupe_key: str,
        existing_id: int,
        *,
        duplicates: Mapping[str, int] | None = None,
    ) -> None:
        self.job_type = job_type
        self.dedupe_key = dedupe_key
        self.existing_id = existing_id
        self.duplicates = dict(duplicates) if duplicates else {dedupe_key: existing_id}
        if len(self.duplicates) == 1:
            message = (
                f"job type {job_type!r} already has an active job {existing_id} "
                f"with dedupe_key {dedupe_key!r}"
            )
        else:
            shown = ", ".join(
                f"{key!r:.80} (job {job_id})" for key, job_id in list(self.duplicates.items())[:10]
            )
            more = len(self.duplicates) - 10
            message = (
                f"job type {job_type!r} already has active jobs with {len(self.duplicates)} "
                f"of these dedupe keys: {shown}" + (f" and {more} more" if more > 0 else "")
            )
        super().__init__(message)


class QueueFull(PQJobsError):
    """A concurrency key already has ``max_waiting`` jobs waiting (``when_waiting_full=
    "refuse"``)."""

    def __init__(self, job_type: str, key: str, waiting: int) -> None:
        self.job_type = job_type
        self.key = key
        self.waiting = waiting
        super().__init__(
            f"job type {job_type!r}: concurrency key {key!r} already has {waiting} jobs "
            "waiting (max_waiting)"
        )


class DatabaseNotReady(PQJobsError):
    """The job database cannot take jobs: no connection to it can be opened, it is not
    PostgreSQL, or ``manage.py migrate`` has not created (or brought up to date) the job
    tables."""


class JobTypeAlreadyRegistered(PQJobsError):
    """Two handlers were registered under one job type name."""


class InvalidJobOption(PQJobsError, ValueError):
    """An option given to ``@job`` or ``enqueue_job`` has an invalid value."""


class UnknownJobOption(InvalidJobOption, TypeError):
    """An option the place it was given to does not take (a misspelt keyword): a
    ``TypeError`` too, as Python's own for an unexpected keyword argument."""


class UnknownJobType(InvalidJobOption):
    """A job type no handler is registered for in this process was enqueued (refused unless
    ``PQJOBS['ALLOW_UNKNOWN_JOB_TYPES']``). The message says where handlers come from and
    which are registered."""

    SHOWN = 20

    def __init__(self, job_type: str, registered: list[str], close: str | None = None) -> None:
        self.job_type = job_type
        self.registered = registered
        shown = ", ".join(repr(name) for name in registered[: self.SHOWN]) or "none"
        more = len(registered) - self.SHOWN
        if more > 0:
            shown += f" and {more} more"
        hint = f"; did you mean {close!r}?" if close else "."
        super().__init__(
            f"no handler is registered for job type {job_type!r}{hint} Handlers are "
            "registered by @job in a jobs.py module of an installed app (INSTALLED_APPS), "
            f"imported when Django starts. Registered: {shown}. If only your workers' code "
            "has this handler, set PQJOBS['ALLOW_UNKNOWN_JOB_TYPES'] = True."
        )


__all__ = [
    "DatabaseNotReady",
    "DuplicateJob",
    "InvalidJobOption",
    "JobCancelled",
    "JobTimeout",
    "JobTypeAlreadyRegistered",
    "PQJobsError",
    "PayloadError",
    "PermanentError",
    "QueueFull",
    "Retry",
    "UnknownJobType",
]


def error_summary(error_type: str, last_error: str) -> str:
    """The message of a job's last error, without its traceback: the line that names the
    error (a traceback's last line, ``Type: message``) without the type, else the first
    line of the text. What a parent is told of its child's failure."""
    lines = [line.strip() for line in (last_error or "").splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback (most recent call last)") else lines[0]
    if error_type:
        # "PermanentError: ..." or "django_pqjobs.errors.PermanentError: ..."
        named = re.match(rf"(?:[\w.]+\.)?{re.escape(error_type.rpartition('.')[2])}:\s*", line)
        if named:
            return line[named.end() :]
    return line


class JobFailed(PQJobsError):
    """``wait_for()``: the job failed for good (``status`` ``"failed"``), or was cancelled
    (:class:`JobWasCancelled`). ``error_type`` and ``error`` are its last error."""

    def __init__(self, job_id: int, status: str, error_type: str, error: str) -> None:
        self.job_id = job_id
        self.status = status
        self.error_type = error_type
        self.error = error
        detail = f"{error_type}: {error}" if error_type else error
        super().__init__(f"job #{job_id} {status}" + (f" ({detail:.500})" if detail else ""))


class JobWasCancelled(JobFailed):
    """``wait_for()``: the job was cancelled (by an operator, or a dependency's failure)."""


class JobExpired(JobFailed):
    """``wait_for()``: the job ended ``expired``: its deadline passed before an attempt
    could start. Also the error a task's result shows for such a job."""


class WaitTimeout(PQJobsError, TimeoutError):
    """``wait_for()``: the job did not finish within the timeout (it may still finish)."""

    def __init__(self, job_id: int, timeout: float, status: str) -> None:
        self.job_id = job_id
        self.status = status
        super().__init__(f"job #{job_id} did not finish within {timeout:g} s (it is {status})")


class JobNotFound(PQJobsError, LookupError):
    """No job has this id (never enqueued, rolled back, or pruned)."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        super().__init__(f"no job #{job_id} (never enqueued, rolled back, or pruned)")
