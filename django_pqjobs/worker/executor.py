"""Running one claimed job in an executor thread and recording how it ended.

Timeouts: the watchdog (see ``worker.py``) raises :class:`JobTimeout` inside the executor's
thread at the deadline. That takes effect at the next Python bytecode; a thread blocked in C
(``time.sleep``, a socket read) cannot be interrupted, so after ``TIMEOUT_GRACE`` it is
abandoned, the attempt is recorded as timed out, and a replacement thread takes its place.
When the abandoned thread finally returns, its completion is fenced off by the claim.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import logging
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import DatabaseError, connections, transaction

from .. import signals
from ..conf import conf
from ..context import JobContext
from ..errors import JobCancelled, JobTimeout, PermanentError, Retry
from ..models import AttemptOutcome, Job
from ..registry import JobType, registry
from . import hooks, queries
from .db import CONNECTION_ERRORS, reset_connection
from .isolation import ChildFailure, run_in_child
from .queries import Claimed, Completion

if TYPE_CHECKING:
    from .completer import Completer

# run() returns this when a successful outcome was handed to the completer to record.
DEFERRED = "deferred"

logger = logging.getLogger("django_pqjobs")


class LostJob(Exception):
    """The attempt was no longer ours when we tried to record its outcome."""


class ResultNotSerializable(PermanentError):
    """The handler returned something that cannot be stored as JSON (retrying won't help)."""


@dataclass
class Slot:
    """One job in flight: what the watchdog needs to enforce its timeout."""

    job: Job
    ctx: JobContext
    claimed: Claimed
    thread: threading.Thread | None = None
    started: float = field(default_factory=time.monotonic)
    deadline: float | None = None
    is_async: bool = False
    state: str = "queued"  # queued -> handler -> finishing -> done
    interrupted_at: float | None = None
    abandoned: bool = False
    isolated: bool = False
    process: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def enter_handler(self) -> None:
        with self.lock:
            self.thread = threading.current_thread()
            self.started = time.monotonic()
            timeout = self.job.timeout_seconds
            self.deadline = None if timeout is None else self.started + float(timeout)
            self.state = "handler"

    def leave_handler(self) -> None:
        """Stop timeouts from firing; cancel one that was raised but not yet delivered."""
        with self.lock:
            if self.state != "handler":
                return
            self.state = "finishing"
            if self.interrupted_at is not None and self.thread is not None:
                _set_async_exc(self.thread, None)

    def interrupt(self) -> bool:
        """Raise JobTimeout in the handler's thread (once). False if it already left."""
        with self.lock:
            if self.state != "handler" or self.interrupted_at is not None or self.thread is None:
                return False
            self.interrupted_at = time.monotonic()
            if not self.is_async:
                _set_async_exc(self.thread, JobTimeout)
            return True


def _set_async_exc(thread: threading.Thread, exc: type[BaseException] | None) -> None:
    ident = thread.ident
    if ident is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exc) if exc is not None else None
    )


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def error_type_name(exc: BaseException) -> str:
    """Builtin and django-pqjobs exceptions by class name, others by dotted path."""
    cls = type(exc)
    if cls.__module__ == "builtins" or cls.__module__.startswith("django_pqjobs."):
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def retry_delay(job_type: JobType | None, attempt: int) -> float:
    policy = job_type.backoff if job_type and job_type.backoff else conf.BACKOFF
    return float(policy.delay(attempt))


class JobRunner:
    """Runs one slot's handler and records the outcome. One per executor thread."""

    def __init__(
        self,
        alias: str,
        on_db_error: Callable[[int], float],
        isolation: str = "thread",
        completer: Completer | None = None,
    ) -> None:
        self.alias = alias
        self.completer = completer
        self.on_db_error = on_db_error
        self.isolation = isolation
        self._loop: asyncio.AbstractEventLoop | None = None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def run(self, slot: Slot) -> str:
        """Run the job; return the outcome name (done/retry/failed/cancelled/lost)."""
        job = slot.job
        job_type = registry.get(job.job_type)
        if job_type is None:
            return self._end(
                slot,
                None,
                outcome=AttemptOutcome.UNKNOWN_TYPE,
                error_type="UnknownJobType",
                error=f"no handler registered for '{job.job_type}'",
                final="failed",
                duration_ms=0,
            )
        slot.is_async = job_type.is_async
        signals.job_started.send(sender=job.job_type, job=job, worker_id=slot.claimed.worker_id)
        try:
            try:
                if job_type.atomic:
                    outcome = self._run_atomic(slot, job_type)
                elif job_type.isolation == "process" or (
                    self.isolation == "process" and job_type.isolation is None
                ):
                    outcome = self._run_isolated(slot, job_type)
                else:
                    result = self._call(slot, job_type)
                    outcome = self._complete(
                        slot, self._serialize_result(slot, result), slot.ctx._pending_progress
                    )
            finally:
                slot.leave_handler()
        except JobTimeout as exc:
            slot.leave_handler()
            return self._fail(
                slot,
                job_type,
                AttemptOutcome.TIMEOUT,
                "JobTimeout",
                str(exc) or f"job ran past its timeout of {job.timeout_seconds} s",
            )
        except JobCancelled as exc:
            return self._end(
                slot,
                job_type,
                outcome=AttemptOutcome.CANCELLED,
                error_type="JobCancelled",
                error=_describe(exc),
                final="cancelled",
            )
        except LostJob:
            logger.warning(
                "job %s %s attempt %s was lost (rescued elsewhere); its outcome was discarded",
                job.id,
                job.job_type,
                job.attempts,
            )
            return "lost"
        except Retry as exc:
            delay = exc.delay if exc.delay is not None else retry_delay(job_type, job.attempts)
            text = exc.reason or "retry requested"
            return self._end(
                slot,
                job_type,
                outcome=AttemptOutcome.ERROR,
                error_type="Retry",
                error=f"{text}\n\n{_describe(exc)}",
                delay=delay,
            )
        except PermanentError as exc:
            return self._end(
                slot,
                job_type,
                outcome=AttemptOutcome.PERMANENT,
                error_type=error_type_name(exc),
                error=_describe(exc),
                final="failed",
            )
        except ChildFailure as exc:
            return self._fail(slot, job_type, exc.outcome, exc.error_type, exc.message)
        except Exception as exc:
            self._drop_broken_connections()
            return self._fail(
                slot, job_type, AttemptOutcome.ERROR, error_type_name(exc), _describe(exc)
            )
        return outcome

    # --- calling the handler ---------------------------------------------------------------

    def _call(self, slot: Slot, job_type: JobType) -> Any:
        slot.enter_handler()
        error: BaseException | None = None
        try:
            hooks.pre_execute(slot.job)
            return self._invoke(slot, job_type)
        except BaseException as exc:
            error = exc
            raise
        finally:
            hooks.post_execute(slot.job, error)

    def _invoke(self, slot: Slot, job_type: JobType) -> Any:
        if not job_type.is_async:
            return job_type.handler(slot.ctx)
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        coro = job_type.handler(slot.ctx)
        timeout = slot.job.timeout_seconds
        if timeout is not None:
            coro = asyncio.wait_for(coro, float(timeout))
        try:
            return self._loop.run_until_complete(coro)
        except TimeoutError:
            raise JobTimeout(f"job ran past its timeout of {timeout} s") from None

    def _run_atomic(self, slot: Slot, job_type: JobType) -> str:
        """Handler work and the completion commit together, or roll back together."""
        with transaction.atomic(using=self.alias):
            result = self._call(slot, job_type)
            slot.leave_handler()
            result_json = self._serialize_result(slot, result)
            if not queries.complete(
                self.alias, slot.claimed, result_json, self._ms(slot), slot.ctx._pending_progress
            ):
                raise LostJob()
        return self._report_done(slot)

    # --- recording outcomes ----------------------------------------------------------------

    def _run_isolated(self, slot: Slot, job_type: JobType) -> str:
        """Run in a child process; translate its report into the job's outcome."""
        slot.isolated = True
        report = run_in_child(slot, self.alias, job_type.memory_limit)
        slot.leave_handler()
        if report.kind == "done":
            return self._complete(slot, report.result_json, report.progress)
        if report.kind == "retry":
            delay = report.delay
            if delay is None:
                delay = retry_delay(job_type, slot.job.attempts)
            return self._end(
                slot,
                job_type,
                outcome=AttemptOutcome.ERROR,
                error_type=report.error_type,
                error=report.traceback,
                delay=delay,
            )
        if report.kind in ("permanent", "cancelled"):
            permanent = report.kind == "permanent"
            return self._end(
                slot,
                job_type,
                outcome=AttemptOutcome.PERMANENT if permanent else AttemptOutcome.CANCELLED,
                error_type=report.error_type,
                error=report.traceback,
                final="failed" if permanent else "cancelled",
            )
        return self._fail(slot, job_type, AttemptOutcome.ERROR, report.error_type, report.traceback)

    def _complete(
        self, slot: Slot, result_json: str | None, progress: dict[str, Any] | None
    ) -> str:
        slot.leave_handler()
        duration = self._ms(slot)
        if self.completer is not None:
            self.completer.submit(slot, Completion(slot.claimed, result_json, duration, progress))
            return DEFERRED
        ok = self._with_db_retry(
            lambda: queries.complete(self.alias, slot.claimed, result_json, duration, progress)
        )
        if not ok:
            raise LostJob()
        return self._report_done(slot)

    def _fail(
        self, slot: Slot, job_type: JobType, outcome: str, error_type: str, error: str
    ) -> str:
        delay = retry_delay(job_type, slot.job.attempts)
        return self._end(
            slot, job_type, outcome=outcome, error_type=error_type, error=error, delay=delay
        )

    def _end(
        self,
        slot: Slot,
        job_type: JobType | None,
        *,
        outcome: str,
        error_type: str,
        error: str,
        final: str = "auto",
        delay: float = 0.0,
        duration_ms: int | None = None,
    ) -> str:
        duration = self._ms(slot) if duration_ms is None else duration_ms
        status = self._with_db_retry(
            lambda: queries.end_attempt(
                self.alias,
                slot.claimed,
                outcome=outcome,
                error_type=error_type,
                error=error,
                duration_ms=duration,
                delay=delay,
                final=final,
            )
        )
        job = slot.job
        if status is None:
            logger.warning(
                "job %s %s attempt %s was lost (rescued elsewhere); its %s outcome was discarded",
                job.id,
                job.job_type,
                job.attempts,
                outcome,
            )
            return "lost"
        first_line = error.strip().splitlines()[-1] if error.strip() else error_type
        if status == "ready":
            logger.warning(
                "job %s %s attempt %s/%s failed (%s), retry in %.0f s: %s",
                job.id,
                job.job_type,
                job.attempts,
                job.max_attempts,
                outcome,
                delay,
                first_line,
            )
            name = "retry"
        else:
            log = logger.info if status == "cancelled" else logger.error
            log(
                "job %s %s attempt %s/%s %s (%s) after %s ms: %s",
                job.id,
                job.job_type,
                job.attempts,
                job.max_attempts,
                status,
                outcome,
                duration,
                first_line,
            )
            name = status
        signals.job_finished.send(sender=job.job_type, job=job, outcome=name, error=error)
        return name

    def _serialize_result(self, slot: Slot, result: Any) -> str | None:
        if result is None:
            return None
        try:
            return json.dumps(result, cls=DjangoJSONEncoder, allow_nan=False)
        except (TypeError, ValueError, RecursionError):
            raise ResultNotSerializable(
                f"job type {slot.job.job_type!r} returned a value that is not "
                f"JSON-serialisable: {type(result).__name__} {result!r:.200}"
            ) from None

    def _ms(self, slot: Slot) -> int:
        return int((time.monotonic() - slot.started) * 1000)

    def _report_done(self, slot: Slot) -> str:
        job = slot.job
        logger.info(
            "job %s %s attempt %s/%s done in %s ms",
            job.id,
            job.job_type,
            job.attempts,
            job.max_attempts,
            self._ms(slot),
        )
        signals.job_finished.send(sender=job.job_type, job=job, outcome="done", error=None)
        return "done"

    def _drop_broken_connections(self) -> None:
        for conn in connections.all(initialized_only=True):
            if conn.in_atomic_block:
                continue
            if conn.errors_occurred and not conn.is_usable():
                conn.close()

    def _with_db_retry(self, operation: Callable[[], Any]) -> Any:
        """Record an outcome, reconnecting through database restarts (bounded)."""
        failures = 0
        while True:
            try:
                return operation()
            except CONNECTION_ERRORS:
                failures += 1
                reset_connection(self.alias)
                if failures >= 8:
                    raise
                wait = self.on_db_error(failures)
                logger.warning(
                    "database unavailable while recording a job outcome; retrying in %.1f s",
                    wait,
                    exc_info=True,
                )
                time.sleep(wait)
            except DatabaseError:
                reset_connection(self.alias)
                raise
