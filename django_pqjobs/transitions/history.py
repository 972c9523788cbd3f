"""Finished jobs into history, and back: where a job is kept, not what its status is.

``pqjobs_job`` is partitioned by its ``shelf`` (``sql/schema/history.sql``): the hot
partition holds every job that is not finished, and the finished ones until :func:`shelve`
moves them, ``PQJOBS["HISTORY_AFTER"]`` after they finished, to the partition of their
status and span of days (UTC), with their attempts. :func:`drop_expired` drops the
partitions whose last day ``RETENTION`` has passed, whole. A shelved job's status never
changes where it is: :func:`unshelve` brings it back to the hot table first (Retry, Skip).
Every read of ``pqjobs_job`` sees every partition.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import date, timedelta
from typing import Any

from django.db import transaction

from ..conf import DAY
from ..sql import held_by_key, queries
from .cursors import cursor_of

QUERIES = queries("history")
_SHELVE = QUERIES["shelve"].replace("{held_by_key}", held_by_key())

SHELVE_BATCH = 5000
# pqjobs_history_prepare() makes at most this many shelves a call (sql/schema/history.sql:
# each holds the locks of two tables and seven indexes to the commit).
PREPARE_AT_MOST = 16
# A status kept less than a day is pruned from the hot table row by row (a partition holds
# a day at least); so is every status while HISTORY_AFTER is None.
SHORTEST_SHELVED = float(DAY)
# A partition holds the jobs of one status that finished within a span of days: a seventh
# of the status's RETENTION (at least a day, at most 31; 31 when kept for ever), so that
# about eight partitions hold a status's history however long it is kept, and a job goes
# at most a span after its retention.
SPANS_PER_RETENTION = 7
LONGEST_SPAN = 31
EPOCH = date(1970, 1, 1)


def span_for(kept: float | None) -> int:
    """The days one history partition spans for a status kept ``kept`` seconds."""
    if kept is None:
        return LONGEST_SPAN
    return max(1, min(LONGEST_SPAN, math.ceil(kept / DAY / SPANS_PER_RETENTION)))


def span_start(day: date, span: int) -> date:
    """The first day of the span of ``span`` days holding ``day`` (spans are counted from
    1970-01-01, so every worker cuts them alike)."""
    return day - timedelta(days=(day - EPOCH).days % span)


def shelf(status: str, start: date, span: int) -> str:
    """A history partition's bound: ``"done/2026-11-27/1"`` (status, first day, days)."""
    return f"{status}/{start.isoformat()}/{span}"


def prepare(alias: str, shelves: Sequence[str]) -> int:
    """Make the partitions of these shelves that do not exist yet, ``PREPARE_AT_MOST`` a
    call; returns how many."""
    made = 0
    with cursor_of(alias) as cursor:
        for first in range(0, len(shelves), PREPARE_AT_MOST):
            chunk = list(shelves[first : first + PREPARE_AT_MOST])
            cursor.execute(QUERIES["prepare"], [chunk])
            made += int(cursor.fetchone()[0])
    return made


def shelve(
    alias: str,
    status: str,
    after: float,
    kept: float | None,
    batch: int = SHELVE_BATCH,
    max_batches: int = 200,
) -> int:
    """Move the jobs of ``status`` that finished more than ``after`` seconds ago (and less
    than ``kept``, their RETENTION; None: for ever) to their history partitions, oldest
    first, ``batch`` a transaction; returns how many moved. The partitions of their spans,
    and of today's and tomorrow's, are made first."""
    span = span_for(kept)
    params: dict[str, Any] = {"status": status, "after": after, "kept": kept, "span": span}
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["spans_to_shelve"], params)
        rows = cursor.fetchall()
    today: date = rows[0][1]
    ahead = {span_start(today, span), span_start(today + timedelta(days=1), span)}
    starts = sorted({row[0] for row in rows if row[0] is not None} | ahead)
    prepare(alias, [shelf(status, start, span) for start in starts])
    params.update(first_day=starts[0], end_day=starts[-1] + timedelta(days=span), batch=batch)
    moved = 0
    for _ in range(max_batches):
        with transaction.atomic(using=alias), cursor_of(alias) as cursor:
            cursor.execute(_SHELVE, params)
            count = int(cursor.fetchone()[0])
        moved += count
        if count < batch:
            break
    return moved


def drop_expired(alias: str, status: str, kept: float) -> int:
    """Drop the history partitions of ``status`` whose whole span is older than ``kept``
    seconds (RETENTION): their jobs, attempts, steps, signals and dependency edges. Returns
    how many jobs went."""
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["drop_expired"], [status, float(kept)])
        return int(cursor.fetchone()[0])


def unshelve(cursor: Any, job_ids: Sequence[int], statuses: Sequence[str]) -> None:
    """Bring the shelved jobs among ``job_ids`` whose status is one of ``statuses`` back to
    the hot table, in the caller's transaction, before a transition changes their status.

    The hot shelf is looked at first: when every one of ``job_ids`` is there (and of
    ``statuses``), nothing is looked for in history, whose partitions would all be planned
    and locked for a lookup by id."""
    ids = sorted(set(job_ids))
    cursor.execute(QUERIES["hot_already"], [ids, list(statuses)])
    if int(cursor.fetchone()[0]) == len(ids):
        return
    cursor.execute(QUERIES["unshelve"], [ids, list(statuses)])
