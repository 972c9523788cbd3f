"""The jobs a worker holds: one :class:`Slot` per claimed job, kept in :class:`InFlight`
from the claim until its verdict is recorded (so its heartbeat goes on until then).

A slot moves through ``queued`` (claimed, waiting for an executor) → ``handler`` (the
handler runs; the watchdog may interrupt it) → ``finishing`` (the verdict is being decided
and recorded) → ``done``. ``abandoned`` marks a thread job that ignored its timeout: its
verdict was recorded by the watchdog and whatever its thread does later is discarded.
"""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ..errors import JobTimeout
from ..transitions import Fence

if TYPE_CHECKING:
    from ..context import JobContext
    from ..models import Job
    from .run_settings import RunSettings

SlotState = Literal["queued", "handler", "finishing", "done"]


@dataclass(slots=True)
class Slot:
    """One job in flight and what the watchdog needs to enforce its timeout."""

    job: Job
    ctx: JobContext
    fence: Fence
    settings: RunSettings | None = None  # read for its claimed batch (None: read when run)
    thread: threading.Thread | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None  # when its executor was done with it (see finish)
    deadline: float | None = None
    is_async: bool = False
    state: SlotState = "queued"
    interrupted_at: float | None = None
    abandoned: bool = False
    isolated: bool = False
    process: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def elapsed_ms(self) -> int:
        """How long the attempt ran: from its start to the end of its executor's work (or to
        now), however long its verdict then waits to be recorded."""
        end = time.monotonic() if self.ended is None else self.ended
        return int((end - self.started) * 1000)

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

    def abandon(self) -> bool:
        """Give up on a handler that ignored its interrupt. False if it left meanwhile."""
        with self.lock:
            if self.state != "handler" or self.abandoned:
                return False
            self.abandoned = True
            return True

    def finish(self) -> bool:
        """Mark the slot done; True if its thread was abandoned meanwhile."""
        with self.lock:
            self.state = "done"
            self.ended = time.monotonic()
            return self.abandoned


def _set_async_exc(thread: threading.Thread, exc: type[BaseException] | None) -> None:
    ident = thread.ident
    if ident is None:
        return
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(ident), ctypes.py_object(exc) if exc is not None else None
    )


class InFlight:
    """The slots of one worker by attempt (job id and attempt number); safe to use from
    every worker thread.

    By attempt, not by job: a job retried at once (``Retry(delay=0)``) can be claimed again
    by this worker between the commit of its retry and the removal of the slot that
    recorded it. Keyed by job, the new slot took the old one's place and was removed with
    it: the worker no longer heartbeated the attempt running, nor counted its outcome.
    """

    def __init__(self) -> None:
        self._slots: dict[tuple[int, int], Slot] = {}
        self._lock = threading.Lock()

    def add(self, slot: Slot) -> None:
        with self._lock:
            self._slots[_attempt_of(slot)] = slot

    def add_all(self, slots: list[Slot]) -> None:
        with self._lock:
            for slot in slots:
                self._slots[_attempt_of(slot)] = slot

    def remove(self, slot: Slot) -> bool:
        """Forget ``slot``; False if it was not held (already removed)."""
        with self._lock:
            return self._slots.pop(_attempt_of(slot), None) is not None

    def remove_all(self, slots: list[Slot]) -> list[bool]:
        """Forget ``slots``; for each, whether it was held."""
        with self._lock:
            pop = self._slots.pop
            return [pop(_attempt_of(slot), None) is not None for slot in slots]

    def snapshot(self) -> list[Slot]:
        with self._lock:
            return list(self._slots.values())

    def fences(self) -> list[Fence]:
        """The attempts this worker still answers for (abandoned ones are being recorded)."""
        return [s.fence for s in self.snapshot() if not s.abandoned]

    def __len__(self) -> int:
        return len(self._slots)

    def __bool__(self) -> bool:
        return bool(self._slots)

    def __iter__(self) -> Iterator[Slot]:
        return iter(self.snapshot())


def _attempt_of(slot: Slot) -> tuple[int, int]:
    return (slot.fence.job_id, slot.fence.attempt)
