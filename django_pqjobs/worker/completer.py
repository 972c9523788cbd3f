"""The completer thread: outcomes are recorded in batches, off the executors' path.

Executors (and the watchdog) hand every finished attempt here and go on with the next job;
the completer passes whatever is waiting to the :class:`~.recorder.Recorder` at once. When
the worker is idle a batch holds one outcome and is written immediately, so batching adds
no latency; under load thousands of UPDATEs become a few. A job stays in the worker's
in-flight set (and keeps its heartbeat) until its outcome is written, so a crash before
that loses nothing: the job is still ``running`` and will be rescued.

Executors also report when a handler *starts*. Those starts are written here too, so that
a rescue can tell a job the worker had claimed ahead but never run (its attempt is given
back) from one whose handler ran. A short job's start is never written: its outcome
arrives in the same batch and says more.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Literal

from django.db import DatabaseError, connections

from .. import transitions
from ..outcomes import Outcome
from .db import reset_connection
from .recorder import Recorder
from .slots import Slot

logger = logging.getLogger("django_pqjobs")

MAX_BATCH = 500

_Item = tuple[Literal["started"], Slot, None] | tuple[Literal["outcome"], Slot, Outcome]


class Completer(threading.Thread):
    def __init__(self, recorder: Recorder) -> None:
        super().__init__(name="pqjobs-completer", daemon=True)
        self.recorder = recorder
        self._queue: queue.Queue[_Item | None] = queue.Queue()

    def submit(self, slot: Slot, outcome: Outcome) -> None:
        """Record ``outcome`` as the end of ``slot``'s attempt."""
        self._queue.put(("outcome", slot, outcome))

    def started(self, slot: Slot) -> None:
        """``slot``'s handler has started."""
        self._queue.put(("started", slot, None))

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        self._queue.put(None)

    def run(self) -> None:
        try:
            stopping = False
            while not stopping:
                items: list[_Item] = []
                item = self._queue.get()
                while True:
                    if item is None:
                        stopping = True
                        break
                    items.append(item)
                    if len(items) >= MAX_BATCH:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                self._handle(items)
        finally:
            connections.close_all()

    def _handle(self, items: list[_Item]) -> None:
        outcomes = [(slot, outcome) for kind, slot, outcome in items if outcome is not None]
        ending = {id(slot) for slot, _ in outcomes}
        starts = [
            slot
            for kind, slot, _ in items
            if kind == "started" and id(slot) not in ending and slot.state != "done"
        ]
        if starts:
            self._mark_started(starts)
        if outcomes:
            try:
                self.recorder.write(outcomes)
            except Exception:
                # A bug, not the database (the recorder retries that itself): free the
                # slots so the worker goes on; the jobs stay running until rescued.
                logger.exception("could not record %s job outcomes", len(outcomes))
                for slot, outcome in outcomes:
                    self.recorder.report(slot, outcome, "unrecorded")

    def _mark_started(self, slots: list[Slot]) -> None:
        try:
            transitions.mark_started(self.recorder.alias, [slot.fence for slot in slots])
        except DatabaseError:
            # Not worth waiting for: at worst a job whose worker then dies is given its
            # attempt back on rescue.
            reset_connection(self.recorder.alias)
            logger.debug("could not record that %s handlers started", len(slots), exc_info=True)
