"""waiting / ready / blocked → expired: a job whose deadline (``expires_in``, ``deadline``)
passed before an attempt could start. The claim never starts such a job
(``sql/schema/claim.sql``); this sweep, run by every worker's maintenance thread, ends
them, and their dependents and batches are settled by the database at its commit."""

from __future__ import annotations

from ..sql import queries
from .cursors import cursor_of

QUERIES = queries("deadlines")

SWEEP_BATCH = 1000


def expire_overdue(alias: str, batch: int = SWEEP_BATCH) -> list[int]:
    """End up to ``batch`` overdue jobs as ``expired`` (earliest deadline first); returns
    their ids. One statement, its own transaction when none is open."""
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["expire"], {"batch": batch})
        return sorted(int(row[0]) for row in cursor.fetchall())
