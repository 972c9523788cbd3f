"""The completer thread: verdicts are recorded in batches, off the executors' path.

Executors (and the watchdog) hand every finished attempt here and go on with the next job;
the completer passes whatever is waiting to the :class:`~.recorder.Recorder` at once. When
the worker is idle a batch holds one verdict and is written immediately, so batching adds
no latency; under load thousands of UPDATEs become a few. A job stays in the worker's
in-flight set (and keeps its heartbeat) until its verdict is written, so a crash before
that loses nothing: the job is still ``running`` and will be rescued.

While the worker claims on its own every few milliseconds (stream mode), successes of jobs
whose end frees nothing else (a concurrency slot, a batch's count, a dependent, a waiter)
are held for up to ``HOLD_MAX_AGE`` and written together: the jobs of a claimed batch end within a
millisecond or two of each other, and writing them once per claim made the completion as
many statements as the claims. A held success keeps its slot in flight (and its heartbeat)
like any other; only its ``done`` shows later. Failures are written at once.

Executors also report when a handler *starts*. Those starts are written here too, so that
a rescue can tell a job the worker had claimed ahead but never run (its attempt is given
back) from one whose handler ran. A start is written once its handler has run for
``START_MARK_DELAY``: most jobs end sooner, and their verdict says more. Writing every start
at once cost a statement per claimed batch, and moved each row away from where the
completion looks for it first. A worker killed within that delay of a start gives the
attempt back, as for a job it never started (at most ``GIVE_BACK_LIMIT`` times per job,
see ``transitions.rescue``).
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable

from django.db import DatabaseError, connections

from .. import transitions
from ..verdicts import Verdict
from .db import reset_connection
from .recorder import Recorder
from .slots import Slot

logger = logging.getLogger("django_pqjobs")

MAX_BATCH = 500
START_MARK_DELAY = 0.1  # seconds a handler runs before its start is written
HOLD_MAX_AGE = 0.05  # seconds a success may be held in stream mode

_Item = tuple[Slot, Verdict]


def _frees_nothing(slot: Slot) -> bool:
    """Whether the end of ``slot``'s job lets nothing else go on: no concurrency slot to
    give back, no batch to count, no dependent or waiter to wake. Only those are held."""
    job = slot.job
    return (
        job.concurrency_key is None
        and job.batch_id is None
        and job.callback_of_id is None
        and not job.has_dependents
        and not job.waited_on
    )


class Completer(threading.Thread):
    """``hold()`` says whether the worker is in stream mode (successes are then held, see
    above); ``on_held()`` is called when one is."""

    def __init__(
        self,
        recorder: Recorder,
        hold: Callable[[], bool] = lambda: False,
        on_held: Callable[[], None] = lambda: None,
    ) -> None:
        super().__init__(name="pqjobs-completer", daemon=True)
        self.recorder = recorder
        self.hold = hold
        self.on_held = on_held
        # SimpleQueue for the reason given at Worker._work: an item per job comes here.
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        # Handlers that started, in the order they did: appended by the executors without
        # waking this thread, which looks at them at least every START_MARK_DELAY.
        self._starts: collections.deque[Slot] = collections.deque()
        self._held: list[_Item] = []
        self._held_since = 0.0
        self._held_lock = threading.Lock()

    def submit(self, slot: Slot, verdict: Verdict) -> None:
        """Record ``verdict`` as the end of ``slot``'s attempt."""
        if verdict.succeeded and self.hold() and _frees_nothing(slot):
            with self._held_lock:
                if not self._held:
                    self._held_since = time.monotonic()
                self._held.append((slot, verdict))
                full = len(self._held) >= MAX_BATCH
            if full:
                for item in self._take_held():
                    self._queue.put(item)
            self.on_held()
            return
        self._queue.put((slot, verdict))

    @property
    def held(self) -> int:
        """How many successes are held (finished, waiting to be written)."""
        return len(self._held)

    def _take_held(self) -> list[_Item]:
        with self._held_lock:
            items, self._held = self._held, []
        return items

    def started(self, slot: Slot) -> None:
        """``slot``'s handler has started."""
        self._starts.append(slot)

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        self._queue.put(None)

    def run(self) -> None:
        try:
            stopping = False
            while not stopping:
                items: list[_Item] = []
                try:
                    first = self._queue.get(timeout=self._next_wake())
                except queue.Empty:
                    pass  # nothing came: only starts or held successes may be due
                else:
                    stopping = self._take(first, items)
                now = time.monotonic()
                if self._held and (
                    stopping or now - self._held_since >= HOLD_MAX_AGE or not self.hold()
                ):
                    items += self._take_held()
                if items:
                    self._write(items)
                self._mark_started(now)
        finally:
            connections.close_all()

    def _take(self, item: _Item | None, items: list[_Item]) -> bool:
        """Add ``item`` and whatever else waits to ``items`` (up to MAX_BATCH); True if
        the thread was asked to stop."""
        while item is not None:
            items.append(item)
            if len(items) >= MAX_BATCH:
                return False
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return False
        return True

    def _next_wake(self) -> float:
        """Seconds until the oldest start waiting here is due, or the oldest held success
        is; START_MARK_DELAY when neither waits."""
        now = time.monotonic()
        wait = START_MARK_DELAY
        if self._starts:
            wait = self._starts[0].started + START_MARK_DELAY - now
        if self._held:
            wait = min(wait, self._held_since + HOLD_MAX_AGE - now)
        return max(0.0, wait)

    def _write(self, items: list[_Item]) -> None:
        try:
            self.recorder.write(items)
        except Exception:
            # A bug, not the database (the recorder retries that itself): free the slots
            # so the worker goes on; the jobs stay running until rescued.
            logger.exception("could not record %s job outcomes", len(items))
            for slot, verdict in items:
                self.recorder.report(slot, verdict, "unrecorded")

    def _mark_started(self, now: float) -> None:
        """Write the starts of the handlers that have run ``START_MARK_DELAY`` and go on."""
        due: list[Slot] = []
        starts = self._starts
        while starts:
            slot = starts[0]
            if slot.state != "done" and slot.started + START_MARK_DELAY > now:
                break
            starts.popleft()
            if slot.state != "done":
                due.append(slot)
        if not due:
            return
        try:
            transitions.mark_started(self.recorder.alias, [slot.fence for slot in due])
        except DatabaseError:
            # Not worth waiting for: at worst a job whose worker then dies is given its
            # attempt back on rescue.
            reset_connection(self.recorder.alias)
            logger.debug("could not record that %s handlers started", len(due), exc_info=True)
