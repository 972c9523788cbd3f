"""The watchdog thread: enforces the timeouts of jobs running in executor threads.

At a job's deadline it raises :class:`~django_pqjobs.JobTimeout` in the handler's thread;
if the handler is still running ``TIMEOUT_GRACE`` seconds later (blocked in C code, where
the exception cannot land), it abandons the thread: the attempt is recorded as timed out
and a replacement thread takes its place, so the worker keeps its capacity. Isolated jobs
are timed by their parent thread instead (``isolation.py``), which kills the child.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from django.db import connections

from ..printable import printable
from ..statuses import FailureKind
from ..verdicts import Verdict
from .recorder import log_fields
from .slots import InFlight, Slot

logger = logging.getLogger("django_pqjobs")

TICK = 0.05  # how often it looks while some running handler has a deadline
IDLE_TICK = 1.0  # ... while none has (it is woken when one starts)


class Watchdog(threading.Thread):
    def __init__(
        self,
        in_flight: InFlight,
        grace: float,
        record: Callable[[Slot, Verdict], None],
        replace_executor: Callable[[], None],
    ) -> None:
        super().__init__(name="pqjobs-watchdog", daemon=True)
        self.in_flight = in_flight
        self.grace = grace
        self.record = record
        self.replace_executor = replace_executor
        self.stopping = threading.Event()
        self._wake = threading.Event()
        self._idle = False  # no handler with a deadline was running at the last look

    def stop(self) -> None:
        self.stopping.set()
        self._wake.set()

    def started(self, slot: Slot) -> None:
        """``slot``'s handler started (its deadline set): wake up if idle.

        Looking every TICK while no running job has a timeout cost a worker a wake-up
        twenty times a second for nothing. The watchdog says it is idle before it looks,
        and a handler sets its deadline before it asks here, so one of the two sees the
        other.
        """
        if slot.deadline is not None and self._idle:
            self._wake.set()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                self._idle = True
                timed = self.check(time.monotonic())
                self._idle = not timed
                self._wake.wait(TICK if timed else IDLE_TICK)
                self._wake.clear()
        finally:
            connections.close_all()

    def check(self, now: float) -> bool:
        """Interrupt or abandon the handlers past their deadlines; whether any running
        handler has one."""
        timed = False
        for slot in self.in_flight:
            if slot.deadline is None or slot.abandoned or slot.isolated or slot.state != "handler":
                continue
            timed = True
            if slot.interrupted_at is None and now >= slot.deadline:
                if slot.interrupt():
                    logger.warning(
                        "job %s %s passed its timeout of %s s: interrupting",
                        slot.job.id,
                        printable(slot.job.job_type),
                        slot.job.timeout_seconds,
                        extra=log_fields(slot, "timeout"),
                    )
            elif slot.interrupted_at is not None and now >= slot.interrupted_at + self.grace:
                self.abandon(slot)
        return timed

    def abandon(self, slot: Slot) -> None:
        """The handler ignored the interrupt (blocked in C): give up on its thread."""
        if not slot.abandon():
            return
        job = slot.job
        logger.error(
            "job %s %s did not stop within %s s of its timeout (blocked outside "
            "Python?): abandoning its thread and starting a replacement",
            job.id,
            printable(job.job_type),
            self.grace,
            extra=log_fields(slot, "timeout"),
        )
        self.record(
            slot,
            Verdict.of_failure(
                FailureKind.TIMEOUT,
                "JobTimeout",
                f"job ran past its timeout of {job.timeout_seconds} s and did not stop "
                f"within {self.grace} s of being interrupted; its thread was abandoned",
            ),
        )
        self.replace_executor()
