"""The reporting thread: what a worker tells the world about itself, on its intervals.

- every ``STATS_INTERVAL``: the attempts it recorded since the last time, added to the
  outcome counters in the database (``stats.py``; Prometheus metrics read them);
- every ``LOG_SUMMARY_INTERVAL``: one log line with the jobs per outcome and the rate over
  the interval (none when the worker recorded nothing);
- every heartbeat interval: when its claim loop last ran (``pqjobs_worker.loop_at``), for
  health checks: a worker whose heartbeat goes on but whose loop is stuck claims nothing;
- every ``capacity.READ_INTERVAL``: the concurrency an operator set for it, if any
  (``capacity.py``), handed to the worker.

It survives database outages like the maintenance thread: counts that could not be written
are kept for the next report.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, ProgrammingError, connections

from .. import capacity
from ..printable import counted
from ..sql import queries
from ..stats import add_totals
from .db import reset_connection
from .maintenance import Periodic
from .tally import Counts, Tally

QUERIES = queries("worker_reporting")

logger = logging.getLogger("django_pqjobs")

FINAL_REPORT_WAIT = 30.0  # seconds the last report waits for a periodic write under way

_MARK_LOOP = QUERIES["mark_loop"]


@dataclass(frozen=True)
class ReportIntervals:
    """Seconds between reports of each kind; None turns one off."""

    stats: float | None
    summary: float | None
    liveness: float


class Reporter(threading.Thread):
    def __init__(
        self,
        alias: str,
        worker_id: str,
        tally: Tally,
        intervals: ReportIntervals,
        loop_age: Callable[[], float],
        running: Callable[[], int],
        on_peers: Callable[[list[tuple[str, list[str] | None]]], None] | None = None,
        on_concurrency: Callable[[int | None], None] | None = None,
    ) -> None:
        super().__init__(name="pqjobs-reporting", daemon=True)
        self.alias = alias
        self.worker_id = worker_id
        self.tally = tally
        self.intervals = intervals
        self.loop_age = loop_age
        self.running = running
        self.on_peers = on_peers
        self.on_concurrency = on_concurrency
        self.stopping = threading.Event()
        self._unwritten = Counts()
        self._summary = Counts()
        # The counts move from the tally to the database under this lock: the periodic
        # write (this thread) and the final one (the worker's) never interleave.
        self._counting = threading.Lock()
        self._summary_since = time.monotonic()
        self.tasks = [
            Periodic(intervals.stats, self.write_stats, first_delay=intervals.stats or 0),
            Periodic(intervals.summary, self.log_summary, first_delay=intervals.summary or 0),
            Periodic(intervals.liveness, self.mark_loop, first_delay=1.0),
        ]
        if on_concurrency is not None:
            self.tasks.append(
                Periodic(capacity.READ_INTERVAL, self.read_concurrency, first_delay=0.0)
            )

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                for task in self.tasks:
                    if task.due(now) and not self.stopping.is_set():
                        self._guarded(task, now)
                wait = min((t.next_run for t in self.tasks if t.interval), default=now + 1) - now
                self.stopping.wait(max(0.05, min(wait, 1.0)))
        finally:
            connections.close_all()

    def read_concurrency(self) -> None:
        assert self.on_concurrency is not None
        try:
            wanted = capacity.concurrency_for(self.alias, self.worker_id)
        except ProgrammingError:
            # The table is missing (migrate) or the role may not read it (the worker's
            # grants): say so once, and run at the concurrency it was started with.
            reset_connection(self.alias)
            logger.warning(
                "worker %s cannot read pqjobs_concurrency (run migrate, or grant SELECT on it "
                "to this role): its concurrency stays as started",
                self.worker_id,
                exc_info=True,
            )
            self.tasks = [t for t in self.tasks if t.action != self.read_concurrency]
            return
        self.on_concurrency(wanted)

    def final_report(self) -> None:
        """Write what is left (called by the worker once all its verdicts are recorded).

        A periodic write this thread may still be in the middle of (the worker waits for
        it only so long) is waited for: the counts it took are in flight, and the process
        must not end before they are written, nor write the rest beside it."""
        if not self._counting.acquire(timeout=FINAL_REPORT_WAIT):
            logger.warning(
                "could not write the last outcome counts of this worker: its reporting "
                "thread was still writing after %.0f s",
                FINAL_REPORT_WAIT,
            )
            return
        try:
            self._write_stats()
        except DatabaseError:
            logger.warning("could not write the last outcome counts of this worker", exc_info=True)
        finally:
            self._counting.release()
            connections.close_all()

    def _guarded(self, task: Periodic, now: float) -> None:
        try:
            task.run(now)
        except DatabaseError:
            reset_connection(self.alias)
            logger.warning("reporting step %s failed; will retry", task.action.__name__)
        except Exception:
            logger.exception("unexpected error in reporting step %s", task.action.__name__)

    def _collect(self) -> None:
        """Move the tally's counts here (the caller holds ``_counting``)."""
        counts = self.tally.take()
        self._summary.merge(counts)
        if self.intervals.stats is not None:
            self._unwritten.merge(counts)

    def write_stats(self) -> None:
        with self._counting:
            self._write_stats()

    def _write_stats(self) -> None:
        self._collect()
        if not self._unwritten:
            return
        counts, self._unwritten = self._unwritten, Counts()
        try:
            add_totals(self.alias, counts.outcome_totals(), counts.bucket_totals())
        except BaseException:
            self._unwritten.merge(counts)
            raise

    def log_summary(self) -> None:
        with self._counting:
            self._collect()
            counts, self._summary = self._summary, Counts()
        now = time.monotonic()
        seconds, self._summary_since = now - self._summary_since, now
        if not counts:
            return
        by_outcome = counts.by_outcome()
        total = sum(by_outcome.values())
        rate = total / seconds if seconds > 0 else 0.0
        running = self.running()
        logger.info(
            "worker %s: %s in the last %.0f s (%.1f/s): %s; %s running",
            self.worker_id,
            counted(total, "attempt"),
            seconds,
            rate,
            ", ".join(f"{n} {outcome}" for outcome, n in sorted(by_outcome.items())),
            running,
            extra={
                "worker_id": self.worker_id,
                "interval_s": round(seconds, 3),
                "outcomes": by_outcome,
                "jobs_per_s": round(rate, 3),
                "running": running,
            },
        )

    def mark_loop(self) -> None:
        """Record when the claim loop last ran; learn which workers are live (and which
        queues they serve) for the listener's choice of whom to wake."""
        live_within = 3 * self.intervals.liveness
        with connections[self.alias].cursor() as cursor:
            cursor.execute(_MARK_LOOP, [max(0.0, self.loop_age()), self.worker_id, live_within])
            peers = [(str(r[0]), _queue_list(r[1])) for r in cursor.fetchall()]
        if self.on_peers is not None:
            self.on_peers(peers)


def _queue_list(value: object) -> list[str] | None:
    """The ``queues`` JSON of a worker row: None (every queue) or a list of names."""
    if isinstance(value, str):
        value = json.loads(value)
    return [str(q) for q in value] if isinstance(value, list) else None
