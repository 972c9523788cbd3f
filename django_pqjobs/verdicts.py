"""The executor's verdict on one attempt, decided where its handler ran: one type and one
classifier.

The executor thread and the child process of an isolated job both turn what the handler
did (returned a value, raised) into a :class:`Verdict` with the functions here; the worker
then records every verdict the same way (``worker/recorder.py``). Nothing here touches the
database.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import psycopg

from . import protection
from .conf import conf
from .durations import in_words
from .errors import (
    InvalidJobOption,
    JobCancelled,
    JobTimeout,
    PayloadError,
    PermanentError,
    Retry,
    Snooze,
)
from .printable import one_line
from .redaction import redact
from .registry import registry
from .serialization import from_json, to_json
from .statuses import AfterFailure, FailureKind
from .workflows import Park

# Frames of these modules come before the handler's own in every traceback; they say
# nothing about the job's failure and are left out of the stored traceback.
_WORKER_MODULES = ("django_pqjobs.worker.", "django_pqjobs.verdicts")


@dataclass(frozen=True)
class Verdict:
    """The executor's verdict on one attempt. ``failure`` (the kind of failure) is None for a
    success.

    For a failure, ``then`` says where the job goes: ``"auto"`` retries while attempts
    remain (after ``delay`` seconds if the handler asked for one, else the backoff policy),
    ``"failed"`` and ``"cancelled"`` end the job at once, ``"release"`` gives the attempt
    back uncharged (its database connection died), ``"park"`` too, the job waiting durably
    (a sleep, a wait for ``signal``) for ``delay`` seconds.
    """

    failure: FailureKind | None = None
    result_json: str | None = None
    progress_json: str | None = None
    error_type: str = ""
    error: str = ""
    then: AfterFailure = "auto"
    delay: float | None = None
    summary: str = ""  # one line for logs: "ValueError: bad input"
    signal: str | None = None  # a park's: the signal it waits for

    @property
    def succeeded(self) -> bool:
        return self.failure is None

    @classmethod
    def of_failure(
        cls,
        failure: FailureKind,
        error_type: str,
        error: str,
        *,
        then: AfterFailure = "auto",
        delay: float | None = None,
        progress_json: str | None = None,
        summary: str | None = None,
        signal: str | None = None,
    ) -> Verdict:
        """A failed attempt's verdict (``summary`` defaults to the error's first line)."""
        return cls(
            failure=failure,
            error_type=error_type,
            error=error,
            then=then,
            delay=delay,
            progress_json=progress_json,
            summary=one_line(error if summary is None else summary),
            signal=signal,
        )


class ResultNotSerializable(PermanentError):
    """The handler returned a value that cannot be stored as JSON (retrying won't help)."""


def success(
    job_type: str,
    result: Any,
    progress_json: str | None = None,
    result_max_bytes: int | None = None,
) -> Verdict:
    """The verdict on a handler that returned ``result``.

    A result the database cannot store fails the attempt for good, with the reason.
    ``result_max_bytes``: ``PQJOBS['RESULT_MAX_BYTES']`` when not given.
    """
    if result is None:
        return Verdict(progress_json=progress_json)
    try:
        result_json = _stored_result(
            job_type,
            to_json(
                result,
                f"the result of job type {job_type!r}",
                conf.RESULT_MAX_BYTES if result_max_bytes is None else result_max_bytes,
                "PQJOBS['RESULT_MAX_BYTES']",
            ),
        )
    except PayloadError as exc:
        return Verdict.of_failure(
            FailureKind.PERMANENT,
            "ResultNotSerializable",
            f"{exc} (returned: {_returned(job_type, result)})",
            then="failed",
            progress_json=progress_json,
        )
    return Verdict(result_json=result_json, progress_json=progress_json)


def _returned(job_type: str, result: Any) -> str:
    """What a handler returned, for the error of a result that cannot be stored: its type,
    and a cut ``repr`` with secret fields masked unless the type is encrypted at rest (its
    result would have been)."""
    known = registry.get(job_type)
    if known is not None and known.encrypted:
        return f"{type(result).__name__} (not shown: the job type is encrypted at rest)"
    return f"{type(result).__name__} {safe_repr(redact(result))}"


def classify(
    exc: BaseException, *, timeout: float | None = None, progress_json: str | None = None
) -> Verdict:
    """The verdict on a handler that raised ``exc``.

    ``Retry`` retries (after its delay, if it gives one); ``PermanentError`` fails at once;
    ``JobCancelled`` ends the job cancelled; ``JobTimeout`` and every other exception count
    as a failed attempt that is retried while attempts remain.
    """
    text = describe(exc)
    name = error_type_name(exc)
    summary = f"{name}: {message_of(exc)}"
    if isinstance(exc, Park):
        return Verdict.of_failure(
            FailureKind.PARKED,
            "Parked",
            exc.note,
            then="park",
            delay=exc.delay,
            progress_json=progress_json,
            summary=exc.note,
            signal=exc.signal,
        )
    if isinstance(exc, Snooze):
        note = exc.reason or f"snoozed for {in_words(exc.delay)}"
        return Verdict.of_failure(
            FailureKind.SNOOZED,
            "Snooze",
            note,
            then="release",
            delay=exc.delay,
            progress_json=progress_json,
            summary=note,
        )
    if isinstance(exc, Retry):
        reason = exc.reason or "retry requested"
        return Verdict.of_failure(
            FailureKind.ERROR,
            "Retry",
            f"{reason}\n\n{text}",
            delay=exc.delay,
            progress_json=progress_json,
            summary=reason,
        )
    if isinstance(exc, PermanentError):
        return Verdict.of_failure(
            FailureKind.PERMANENT,
            name,
            text,
            then="failed",
            progress_json=progress_json,
            summary=summary,
        )
    if isinstance(exc, JobCancelled):
        return Verdict.of_failure(
            FailureKind.CANCELLED,
            "JobCancelled",
            text,
            then="cancelled",
            progress_json=progress_json,
            summary=summary,
        )
    if isinstance(exc, JobTimeout):
        message = message_of(exc) or f"job ran past its timeout of {timeout} s"
        return Verdict.of_failure(
            FailureKind.TIMEOUT, "JobTimeout", message, progress_json=progress_json
        )
    if connection_lost(exc):
        return Verdict.of_failure(
            FailureKind.RELEASED,
            CONNECTION_LOST,
            text,
            then="release",
            progress_json=progress_json,
            summary=f"database connection lost ({summary})",
        )
    return Verdict.of_failure(
        FailureKind.ERROR, name, text, progress_json=progress_json, summary=summary
    )


# The error type of an attempt given back because its database connection failed.
CONNECTION_LOST = "DatabaseConnectionLost"
# SQLSTATEs that say the server or the connection went away, not the statement was wrong:
# connection exceptions, the server shutting down or in crash recovery, and a transaction
# that finds itself read-only (a connection that now reaches a standby after a failover).
_CONNECTION_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "25006"})


def connection_lost(exc: BaseException) -> bool:
    """Whether ``exc`` (or an exception it was raised from or during) says a database
    connection died, rather than that the handler did something wrong.

    psycopg says so with a connection-class SQLSTATE (08xxx), one of the shutdown ones, a
    read-only transaction after a failover, or an ``OperationalError`` / ``InterfaceError``
    with no SQLSTATE at all (a closed or broken connection); Django wraps those as its own
    errors with psycopg's as the cause. A statement timeout or a deadlock is the handler's.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen or len(seen) > 50:
            continue
        seen.add(id(current))
        if isinstance(current, psycopg.Error):
            sqlstate = current.sqlstate
            if sqlstate is None:
                if isinstance(current, psycopg.OperationalError | psycopg.InterfaceError):
                    return True
            elif sqlstate.startswith("08") or sqlstate in _CONNECTION_SQLSTATES:
                return True
        todo += [current.__cause__, current.__context__]
    return False


def unknown_type(job_type: str) -> Verdict:
    return Verdict.of_failure(
        FailureKind.UNKNOWN_TYPE,
        "UnknownJobType",
        f"no handler registered for '{job_type}'",
        then="failed",
    )


def error_type_name(exc: BaseException) -> str:
    """Builtin and django-pqjobs exceptions by class name, others by dotted path."""
    cls = type(exc)
    if cls.__module__ == "builtins" or cls.__module__.startswith("django_pqjobs."):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def describe(exc: BaseException) -> str:
    """The exception's traceback, starting at the first frame outside the worker."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        module = tb.tb_frame.f_globals.get("__name__", "")
        if not module.startswith(_WORKER_MODULES):
            break
        tb = tb.tb_next
    try:
        return "".join(traceback.format_exception(type(exc), exc, tb))
    except Exception:  # an exception whose __str__ itself raises
        return f"{error_type_name(exc)} (its message could not be formatted)"


def message_of(exc: BaseException) -> str:
    """``str(exc)``, never raising."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__name__} whose str() failed>"


def safe_repr(value: Any, limit: int = 200) -> str:
    """``repr`` cut to ``limit`` characters, never raising (values from handlers)."""
    try:
        text = repr(value)
    except Exception:
        text = f"<{type(value).__name__} whose repr() failed>"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _stored_result(job_type: str, result_json: str) -> str:
    """The result as stored: encrypted at rest for a type declared ``encrypted``: whole,
    or the fields it names when the result is an object (else whole)."""
    known = registry.get(job_type)
    if known is None or not known.encrypted:
        return result_json
    encrypted, value = known.encrypted, None
    if encrypted is not True:
        value = from_json(result_json)
        if not isinstance(value, dict):
            encrypted = True
    try:
        return protection.seal_value(
            value, encrypted, result_json, f"the result of job type {job_type!r}", job_type
        )
    except InvalidJobOption as exc:  # no keys, or no cryptography: fail it, store nothing
        raise PayloadError(str(exc)) from None
