"""The reporting thread: what a worker tells the world about itself, on its intervals.

- every ``STATS_INTERVAL``: the attempts it recorded since the last time, added to the
  outcome counters in the database (``stats.py``; Prometheus metrics read them);
- every ``LOG_SUMMARY_INTERVAL``: one log line with the jobs per outcome and the rate over
  the interval (none when the worker recorded nothing);
- every heartbeat interval: when its claim loop last ran (``pqjobs_worker.loop_at``), for
  health checks: a worker whose heartbeat goes on but whose loop is stuck claims nothing.

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

from django.db import DatabaseError, connections

from ..printable import counted
from ..stats import add_totals
from .db import reset_connection
from .maintenance import Periodic
from .tally import Counts, Tally

logger = logging.getLogger("django_pqjobs")

_MARK_LOOP = """
WITH marked AS (
    UPDATE pqjobs_worker SET loop_at = now() - make_interval(secs => %s) WHERE worker_id = %s
)
SELECT worker_id, queues FROM pqjobs_worker
WHERE heartbeat_at > now() - make_interval(secs => %s)
"""


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
    ) -> None:
        super().__init__(name="pqjobs-reporting", daemon=True)
        self.alias = alias
        self.worker_id = worker_id
        self.tally = tally
        self.intervals = intervals
        self.loop_age = loop_age
        self.running = running
        self.on_peers = on_peers
        self.stopping = threading.Event()
        self._unwritten = Counts()
        self._summary = Counts()
        self._summary_since = time.monotonic()
        self.tasks = [
            Periodic(intervals.stats, self.write_stats, first_delay=intervals.stats or 0),
            Periodic(intervals.summary, self.log_summary, first_delay=intervals.summary or 0),
            Periodic(intervals.liveness, self.mark_loop, first_delay=1.0),
        ]

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

    def final_report(self) -> None:
        """Write what is left (called by the worker once all its verdicts are recorded)."""
        try:
            self.write_stats()
        except DatabaseError:
            logger.warning("could not write the last outcome counts of this worker", exc_info=True)
        finally:
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
        counts = self.tally.take()
        self._summary.merge(counts)
        if self.intervals.stats is not None:
            self._unwritten.merge(counts)

    def write_stats(self) -> None:
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
