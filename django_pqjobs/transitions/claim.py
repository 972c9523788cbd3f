"""ready → running: the claim (flow control may move due jobs to blocked instead, in the
same call; see flow.py for holding them back without claiming)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .cursors import batch_cursor

# What a claim returns per job, in this order: the output of pqjobs_claim() (migration 0014
# writes the same list), from which ``worker/claiming.py`` builds the Job.
# Timestamps travel as epoch seconds: Django's timestamptz loader is pure Python and cost
# more per claimed job than everything else in the claim. A float8 holds today's epoch to
# a quarter of a microsecond, so the datetimes are exact. JSON travels as text, decoded
# by the worker one job at a time.
CLAIM_COLUMNS = (
    "id",
    "job_type",
    "queue",
    "payload::text",
    "priority",
    "attempts",
    "max_attempts",
    "timeout_seconds",
    "dedupe_key",
    "parent_id",
    "schedule_id",
    "last_error",
    "error_type",
    "result::text",
    "duration_ms",
    "progress::text",
    *(
        f"extract(epoch FROM {name})::float8"
        for name in (
            "run_after",
            "locked_at",
            "created_at",
            "finished_at",
            "cancel_requested_at",
            "started_at",
        )
    ),
    "concurrency_key",
    "concurrency_limit",
    "rate_key",
    "rate_limit",
    "rate_period",
    "trace_context::text",
    "retried_from",
    "batch_id",
    "callback_of_id",
    "waiting_for",
    "on_dependency_failure",
    "has_dependents",
    "waited_on",
    "ctid::text",  # where the claimed version of the row lies (Fence.tid)
)
# Settings for hold_back()'s transaction (pqjobs_claim() sets the same for itself): walk
# pqjobs_job_claim in order and stop after LIMIT rows, whatever the planner's statistics
# say; commit without waiting for the WAL flush (see pqjobs_claim() in migration 0014).
CLAIM_PLAN = (
    "SELECT set_config('enable_bitmapscan', 'off', true), "
    "set_config('enable_seqscan', 'off', true), "
    "set_config('synchronous_commit', 'off', true)"
)
# The claim is the PL/pgSQL function pqjobs_claim() (migration 0014): its plans are made
# once per server session instead of on every claim, and with no flow control in play it
# claims the jobs it locked where they lie (by TID).
_CLAIM = "SELECT * FROM pqjobs_claim(%s, %s::integer, %s::text[], %s::integer)"


@dataclass(frozen=True)
class Claimed:
    """What a claim did: the rows of the jobs it moved to ``running`` (columns of
    :data:`CLAIM_COLUMNS`), and how many due jobs it moved to ``blocked`` instead."""

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
        return Claimed([], 0)
    with batch_cursor(alias) as cursor:
        cursor.execute(_CLAIM, [worker_id, limit, list(queues) if queues else None, min_priority])
        rows = cursor.fetchall()
    blocked = int(rows[0][-1]) if rows else 0
    return Claimed([row for row in rows if row[0] is not None], blocked)
