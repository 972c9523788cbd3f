"""Recording successful attempts in batches.

Executor threads hand a finished job to the completer and go on with the next one; the
completer records everything that is waiting in one statement. When the worker is idle a
batch holds one job and is written at once, so batching adds no latency; under load it
turns thousands of UPDATEs into a few. A job stays in the worker's in-flight set (and keeps
its heartbeat) until its batch is written, so a crash before that loses nothing: the job
is still ``running`` and will be rescued.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from .. import signals
from . import queries
from .db import reset_connection
from .queries import Completion

if TYPE_CHECKING:
    from .executor import Slot

logger = logging.getLogger("django_pqjobs")

MAX_BATCH = 500


class Completer(threading.Thread):
    def __init__(
        self,
        alias: str,
        finished: Callable[[Slot, str], None],
        retry_delay: Callable[[int], float],
    ) -> None:
        super().__init__(name="pqjobs-completer", daemon=True)
        self.alias = alias
        self.finished = finished
        self.retry_delay = retry_delay
        self._queue: queue.Queue[tuple[Slot, Completion] | None] = queue.Queue()

    def submit(self, slot: Slot, completion: Completion) -> None:
        self._queue.put((slot, completion))

    def stop(self) -> None:
        """Write what is queued, then end the thread."""
        self._queue.put(None)

    def run(self) -> None:
        try:
            stopping = False
            while not stopping:
                batch: list[tuple[Slot, Completion]] = []
                item = self._queue.get()
                while True:
                    if item is None:
                        stopping = True
                        break
                    batch.append(item)
                    if len(batch) >= MAX_BATCH:
                        break
                    try:
                        item = self._queue.get_nowait()
                    except queue.Empty:
                        break
                if batch:
                    self._write(batch)
        finally:
            connections.close_all()

    def _write(self, batch: list[tuple[Slot, Completion]]) -> None:
        failures = 0
        while True:
            try:
                done = queries.complete_many(self.alias, [c for _, c in batch])
                break
            except DatabaseError:
                reset_connection(self.alias)
                failures += 1
                if failures >= 8:
                    logger.exception(
                        "could not record %s finished jobs; they stay running until rescued",
                        len(batch),
                    )
                    for slot, _ in batch:
                        self.finished(slot, "error")
                    return
                wait = self.retry_delay(failures)
                logger.warning(
                    "database unavailable while recording %s finished jobs; retrying in %.1f s",
                    len(batch),
                    wait,
                    exc_info=failures == 1,
                )
                time.sleep(wait)
        for slot, completion in batch:
            job = slot.job
            if job.id in done:
                logger.info(
                    "job %s %s attempt %s/%s done in %s ms",
                    job.id,
                    job.job_type,
                    job.attempts,
                    job.max_attempts,
                    completion.duration_ms,
                )
                signals.job_finished.send(sender=job.job_type, job=job, outcome="done", error=None)
                self.finished(slot, "done")
            else:
                logger.warning(
                    "job %s %s attempt %s was lost (rescued elsewhere); its outcome was discarded",
                    job.id,
                    job.job_type,
                    job.attempts,
                )
                self.finished(slot, "lost")
