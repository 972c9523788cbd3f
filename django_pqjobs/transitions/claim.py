"""ready → running: the claim (flow control may move due jobs to blocked instead, in the
same call; see flow.py for holding them back without claiming)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..sql import queries
from .cursors import batch_cursor

QUERIES = queries("claim")

# Settings for hold_back()'s transaction (pqjobs_claim() sets the same for itself): walk
# pqjobs_job_claim in order and stop after LIMIT rows, whatever the planner's statistics
# say; commit without waiting for the WAL flush (see pqjobs_claim() in migration 0014).
CLAIM_PLAN = (
    "SELECT set_config('enable_bitmapscan', 'off', true), "
    "set_config('enable_seqscan', 'off', true), "
    "set_config('synchronous_commit', 'off', true)"
)


@dataclass(frozen=True)
class Claimed:
    """What a claim did: the rows of the jobs it moved to ``running``, their ``columns`` as
    pqjobs_claim() names them (sql/schema/claim.sql: the one declaration of a claimed row),
    and how many due jobs it moved to ``blocked`` instead."""

    columns: tuple[str, ...]
    rows: list[tuple[Any, ...]]
    blocked: int


def claim(
    alias: str,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    min_priority: int | None = None,
) -> Claimed:
    """ready → running for up to ``limit`` due jobs, highest priority first.

    One statement, ``FOR UPDATE SKIP LOCKED``: concurrent claimers never get the same job.
    ``min_priority``: only jobs of at least that priority. Flow control applies in the same
    statement: a job whose queue or type is paused, whose rate is used up or whose
    concurrency key is at its limit becomes ``blocked`` instead.
    """
    if limit < 1:
        return Claimed((), [], 0)
    with batch_cursor(alias) as cursor:
        cursor.execute(
            QUERIES["claim"], [worker_id, limit, list(queues) if queues else None, min_priority]
        )
        rows = cursor.fetchall()
        columns = tuple(column.name for column in cursor.description)
    # the last column counts the jobs held back; a claim that held some and claimed none
    # returns one row of NULLs but that count
    blocked = int(rows[0][-1]) if rows else 0
    return Claimed(columns, [row for row in rows if row[0] is not None], blocked)
