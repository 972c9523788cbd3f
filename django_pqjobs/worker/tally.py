"""What a worker recorded since it last reported: counts per job type, queue and outcome,
and the runtime histogram. Filled on every recorded attempt (a dictionary update under a
lock), emptied by the reporting thread (``reporting.py``)."""

from __future__ import annotations

import threading
from bisect import bisect_left
from dataclasses import dataclass, field

from ..stats import DURATION_BUCKETS, TIMED_OUTCOMES, BucketTotal, OutcomeTotal

_BOUNDS_MS = [bound * 1000 for bound in DURATION_BUCKETS]


@dataclass
class Counts:
    """One report's worth of counts (what :meth:`Tally.take` hands over)."""

    outcomes: dict[tuple[str, str, str], list[int]] = field(default_factory=dict)
    buckets: dict[tuple[str, str, float], int] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.outcomes)

    def by_outcome(self) -> dict[str, int]:
        totals: dict[str, int] = {}
        for (_, _, outcome), (count, _) in self.outcomes.items():
            totals[outcome] = totals.get(outcome, 0) + count
        return totals

    def merge(self, other: Counts) -> None:
        for key, (count, ms) in other.outcomes.items():
            mine = self.outcomes.setdefault(key, [0, 0])
            mine[0] += count
            mine[1] += ms
        for bucket, count in other.buckets.items():
            self.buckets[bucket] = self.buckets.get(bucket, 0) + count

    def outcome_totals(self) -> list[OutcomeTotal]:
        return [OutcomeTotal(*key, c, ms) for key, (c, ms) in self.outcomes.items()]

    def bucket_totals(self) -> list[BucketTotal]:
        return [BucketTotal(*key, count) for key, count in self.buckets.items()]


class Tally:
    """Thread-safe counts of recorded attempts since the last :meth:`take`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts = Counts()

    def add(self, job_type: str, queue: str, outcome: str, duration_ms: int) -> None:
        self.add_all([(job_type, queue, outcome, duration_ms)])

    def add_all(self, attempts: list[tuple[str, str, str, int]]) -> None:
        """Count attempts, each ``(job type, queue, outcome, duration in ms)``."""
        with self._lock:
            outcomes = self._counts.outcomes
            buckets = self._counts.buckets
            for job_type, queue, outcome, duration_ms in attempts:
                entry = outcomes.get((job_type, queue, outcome))
                if entry is None:
                    entry = outcomes[(job_type, queue, outcome)] = [0, 0]
                entry[0] += 1
                entry[1] += duration_ms
                if outcome in TIMED_OUTCOMES:
                    bound = DURATION_BUCKETS[bisect_left(_BOUNDS_MS, duration_ms)]
                    key = (job_type, queue, bound)
                    buckets[key] = buckets.get(key, 0) + 1

    def take(self) -> Counts:
        """The counts so far; the tally starts again from zero."""
        with self._lock:
            counts, self._counts = self._counts, Counts()
        return counts

    def give_back(self, counts: Counts) -> None:
        """Counts that could not be written: keep them for the next report."""
        with self._lock:
            self._counts.merge(counts)
