"""Running one claimed job and deciding how it ended.

The handler runs in the executor's thread (``def`` directly, ``async def`` on the thread's
own event loop), inside one transaction with its completion (``@job(atomic=True)``), or in
a child process (``isolation="process"``, see ``isolation.py``). What it did becomes a
:class:`~django_pqjobs.verdicts.Verdict`; the worker hands that to the completer, which
records it.

Timeouts of thread jobs: the watchdog raises :class:`JobTimeout` inside the executor's
thread at the deadline. That takes effect at the next Python bytecode; a thread blocked in C
(``time.sleep``, a socket read) cannot be interrupted, so after ``TIMEOUT_GRACE`` the
watchdog abandons it, records the attempt as timed out, and a replacement thread takes its
place. When the abandoned thread finally returns, its verdict is discarded.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from .. import signals, tracing, transitions, verdicts
from ..errors import JobCancelled, JobTimeout
from ..options import Isolation
from ..registry import JobType, registry
from ..statuses import Outcome
from ..verdicts import Verdict
from .db import drop_connections_closed_by_server, reset_connection, thread_connections
from .isolation import run_in_child
from .recorder import completion_of
from .run_settings import RunSettings
from .slots import Slot


class _LostJob(Exception):
    """An atomic job's completion found the attempt no longer ours: roll back."""


class _Refused(Exception):
    """An atomic job's result cannot be stored: roll back its work."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.summary)
        self.verdict = verdict


logger = logging.getLogger("django_pqjobs")

# A job that starts within this many seconds of the previous one's end, on the same thread,
# finds its connections as that job left them: they are not looked at again. The look is a
# select() per connection, and in CPython every system call gives up the GIL: between
# back-to-back short jobs it cost a worker a quarter of a no-op job's cost once its handlers
# had opened a connection (docs/benchmarks.md). What it guards against is a connection the
# server closed while the thread sat idle; a close between the look and the handler's first
# query is missed either way.
LOOK_AFTER_IDLE = 0.002


class Executor:
    """Runs jobs for one executor thread (which owns its connection and event loop).

    ``isolate=False`` runs the job types that ask for a child process in the thread too
    (``testing.drain``: a test's jobs run where the test can see them).
    """

    def __init__(
        self,
        alias: str,
        isolation: Isolation,
        on_start: Callable[[Slot], None],
        *,
        isolate: bool = True,
    ) -> None:
        self.alias = alias
        self.isolation = isolation
        self.on_start = on_start
        self.isolate = isolate
        self._loop: asyncio.AbstractEventLoop | None = None
        self._connections: list[BaseDatabaseWrapper] | None = None  # made in the thread
        self._last_end = -math.inf  # time.monotonic() when this thread's last job ended

    def attempt(self, slot: Slot) -> tuple[Verdict, Outcome | None]:
        """:meth:`run`, with a bug of the worker's own (not the job's) recorded as the
        attempt's error, traceback included, so that the job is never left running."""
        try:
            return self.run(slot)
        except Exception as exc:
            logger.exception("unexpected error while running job %s", slot.job.id)
            return verdicts.classify(exc), None

    def close(self) -> None:
        if self._loop is not None:
            self._loop.close()
            self._loop = None

    def run(self, slot: Slot) -> tuple[Verdict, Outcome | None]:
        """Run the job. Returns its verdict, and the outcome it was already recorded with
        (atomic jobs record their completion themselves) or None."""
        if slot.settings is None:
            slot.settings = RunSettings.read()
        try:
            span = tracing.attempt_span(slot.job, slot.settings.tracer)
            if span is None:
                return self._run(slot, slot.settings)
            with span:
                verdict, recorded = self._run(slot, slot.settings)
                tracing.record_verdict(span, verdict.succeeded, verdict.summary)
                return verdict, recorded
        finally:
            self._last_end = time.monotonic()

    def _run(self, slot: Slot, settings: RunSettings) -> tuple[Verdict, Outcome | None]:
        job = slot.job
        job_type = registry.resolve(job.job_type)
        if job_type is None:
            return verdicts.unknown_type(job.job_type), None
        slot.is_async = job_type.is_async
        if self._connections is None:
            self._connections = thread_connections()
        drop_connections_closed_by_server(
            self._connections, look=time.monotonic() - self._last_end > LOOK_AFTER_IDLE
        )
        signals.job_started.send(sender=job.job_type, job=job, worker_id=slot.fence.worker_id)
        if job_type.atomic:
            return self._run_atomic(slot, job_type, settings)
        if self.isolate and (
            job_type.isolation == "process"
            or (job_type.isolation is None and self.isolation == "process")
        ):
            return self._run_isolated(slot, job_type), None
        return self._run_in_thread(slot, job_type, settings), None

    # --- the three ways to run a handler ---------------------------------------------

    def _run_in_thread(self, slot: Slot, job_type: JobType, settings: RunSettings) -> Verdict:
        try:
            try:
                result = self._call(slot, job_type, settings)
            finally:
                slot.leave_handler()
        except BaseException as exc:  # the handler's failure, a timeout or a cancel
            self._drop_broken_connections()
            return self._classify(slot, exc)
        return verdicts.success(
            slot.job.job_type, result, slot.ctx.progress_json(), settings.result_max_bytes
        )

    def _run_atomic(
        self, slot: Slot, job_type: JobType, settings: RunSettings
    ) -> tuple[Verdict, Outcome | None]:
        """Handler work and the completion commit together, or roll back together."""
        verdict = Verdict()
        try:
            with transaction.atomic(using=self.alias):
                try:
                    result = self._call(slot, job_type, settings)
                finally:
                    slot.leave_handler()
                verdict = verdicts.success(
                    slot.job.job_type, result, slot.ctx.progress_json(), settings.result_max_bytes
                )
                if not verdict.succeeded:
                    raise _Refused(verdict)
                if not transitions.complete(self.alias, completion_of(slot, verdict)):
                    raise _LostJob()
        except _LostJob:
            return verdict, "lost"
        except _Refused as refused:
            return refused.verdict, None
        except BaseException as exc:
            self._drop_broken_connections()
            return self._classify(slot, exc), None
        return verdict, "done"

    def _run_isolated(self, slot: Slot, job_type: JobType) -> Verdict:
        """In a child process that is killed on timeout or cancel."""
        slot.isolated = True
        self.on_start(slot)
        try:
            return run_in_child(slot, self.alias, job_type.memory_limit)
        except (JobTimeout, JobCancelled) as exc:
            return self._classify(slot, exc)
        finally:
            slot.leave_handler()

    # --- calling the handler -----------------------------------------------------------

    def _call(self, slot: Slot, job_type: JobType, settings: RunSettings) -> Any:
        slot.enter_handler()
        self.on_start(slot)
        error: BaseException | None = None
        try:
            settings.hooks.pre_execute(slot.job)
            return self._invoke(slot, job_type)
        except BaseException as exc:
            error = exc
            raise
        finally:
            settings.hooks.post_execute(slot.job, error)

    def _invoke(self, slot: Slot, job_type: JobType) -> Any:
        if not job_type.is_async:
            return job_type.call(slot.ctx)
        if self._loop is None:
            self._loop = asyncio.new_event_loop()
        coro = job_type.call(slot.ctx)
        timeout = slot.job.timeout_seconds
        if timeout is not None:
            coro = asyncio.wait_for(coro, float(timeout))
        try:
            return self._loop.run_until_complete(coro)
        except TimeoutError:
            raise JobTimeout(f"job ran past its timeout of {timeout} s") from None

    def _classify(self, slot: Slot, exc: BaseException) -> Verdict:
        verdict = verdicts.classify(
            exc, timeout=slot.job.timeout_seconds, progress_json=slot.ctx.progress_json()
        )
        if verdict.then == "release":
            # a connection that still works may reach a server that is now read-only (a
            # standby after a failover): the next job opens fresh ones
            for conn in connections.all(initialized_only=True):
                if not conn.in_atomic_block:
                    reset_connection(conn.alias)
        return verdict

    def _drop_broken_connections(self) -> None:
        """A handler's error may have broken this thread's connections: drop those, so the
        next job starts on a fresh one."""
        for conn in connections.all(initialized_only=True):
            if conn.in_atomic_block:
                continue
            if conn.errors_occurred and not conn.is_usable():
                conn.close()
