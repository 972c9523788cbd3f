"""Outcome counters in the database: what every worker recorded, for Prometheus metrics.

Each worker counts the attempts it records in memory (``worker/tally.py``) and adds them
here every ``PQJOBS['STATS_INTERVAL']`` and when it stops, in one statement. Counts only
grow (pruning the job table leaves them alone), summed over every worker on every host:
counters in the Prometheus sense. A worker killed with ``kill -9`` loses what it had not
added yet (at most one interval).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connections

from .sql import queries

QUERIES = queries("stats")

# Upper bounds (seconds) of the runtime histogram's buckets: from no-op jobs to hour-long
# ones. The last bucket is +Inf.
DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1800,
    3600,
    math.inf,
)

# The outcomes whose attempts ran a handler: their durations go in the histogram.
TIMED_OUTCOMES = frozenset({"done", "retry", "failed", "cancelled", "snoozed", "parked"})


@dataclass(frozen=True)
class OutcomeTotal:
    job_type: str
    queue: str
    outcome: str
    count: int
    duration_ms: int


@dataclass(frozen=True)
class BucketTotal:
    job_type: str
    queue: str
    le: float
    count: int


_ADD = QUERIES["add"]


def add_totals(
    alias: str, outcomes: Sequence[OutcomeTotal], buckets: Sequence[BucketTotal]
) -> None:
    """Add one worker's counts since its last report (one statement, one round trip).

    Rows are written in key order, so two workers adding the same keys at once wait for
    each other instead of deadlocking.
    """
    if not outcomes and not buckets:
        return
    rows = sorted(outcomes, key=lambda t: (t.job_type, t.queue, t.outcome))
    bucket_rows = sorted(buckets, key=lambda b: (b.job_type, b.queue, b.le))
    with connections[alias].cursor() as cursor:
        cursor.execute(
            _ADD,
            [
                [r.job_type for r in rows],
                [r.queue for r in rows],
                [r.outcome for r in rows],
                [r.count for r in rows],
                [r.duration_ms for r in rows],
                [b.job_type for b in bucket_rows],
                [b.queue for b in bucket_rows],
                [float(b.le) for b in bucket_rows],  # (the bounds mix 1 and 0.5)
                [b.count for b in bucket_rows],
            ],
        )


def outcome_totals(alias: str) -> list[OutcomeTotal]:
    with connections[alias].cursor() as cursor:
        cursor.execute(QUERIES["outcome_totals"])
        return [OutcomeTotal(r[0], r[1], r[2], int(r[3]), int(r[4])) for r in cursor.fetchall()]


def bucket_totals(alias: str) -> list[BucketTotal]:
    with connections[alias].cursor() as cursor:
        cursor.execute(QUERIES["bucket_totals"])
        return [BucketTotal(r[0], r[1], float(r[2]), int(r[3])) for r in cursor.fetchall()]
