"""ready → ready, one priority higher: priority aging (``PQJOBS["PRIORITY_AGING"]``).

A due job of an aging queue that has waited ``every`` seconds, since it was due and since
its last change, has its priority raised by 1, up to the queue's cap; so a job that waits k
intervals is raised k times, never past the cap, and low-priority work is not starved for
ever by a stream of higher-priority jobs. The status does not change. Every worker's
maintenance thread runs the sweep (``worker/housekeeping.age_priorities``).
"""

from __future__ import annotations

from ..sql import queries
from .cursors import cursor_of

QUERIES = queries("aging")

AGING_BATCH = 1000


def raise_priority(
    alias: str, queue: str, every: float, up_to: int, batch: int = AGING_BATCH
) -> int:
    """Raise by 1 the priority of up to ``batch`` ready jobs of ``queue`` that have been due
    and unchanged for ``every`` seconds and are below ``up_to``; returns how many. One
    statement, its own transaction when none is open; rows another transaction holds are
    left for the next sweep."""
    with cursor_of(alias) as cursor:
        cursor.execute(
            QUERIES["raise_priority"],
            {"queue": queue, "every": every, "up_to": up_to, "batch": batch},
        )
        return int(cursor.rowcount)
