"""ready → running: the claim, the one place flow control decides (it moves the due jobs it
holds to blocked in the same call), and ready → blocked alone (:func:`hold_back`)."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..sql import queries
from .cursors import batch_cursor

QUERIES = queries("claim")


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
    scan: int | None = None,
    connection: Any = None,
) -> Claimed:
    """ready → running for up to ``limit`` due jobs, highest priority first.

    One statement, ``FOR UPDATE SKIP LOCKED``: concurrent claimers never get the same job.
    ``min_priority``: only jobs of at least that priority. Flow control applies in the same
    statement: a job whose queue or type is paused, whose rate is used up or whose
    concurrency key is at its limit becomes ``blocked`` instead. ``scan``: how many due
    jobs to look at for that, when more than ``limit``. ``connection``: a psycopg
    connection in autocommit to claim on instead of this thread's Django connection (the
    worker's listener claims on the connection that heard the notification).
    """
    if limit < 1 and not scan:
        return Claimed((), [], 0)
    params = [worker_id, limit, list(queues) if queues else None, min_priority, scan]
    if connection is not None:
        with connection.cursor() as cursor:
            cursor.execute(QUERIES["claim"], params)
            rows = cursor.fetchall()
            columns = _columns(cursor)
    else:
        with batch_cursor(alias) as cursor:
            cursor.execute(QUERIES["claim"], params)
            rows = cursor.fetchall()
            columns = _columns(cursor)
    # the last column counts the jobs held back; a claim that held some and claimed none
    # returns one row of NULLs but that count
    blocked = int(rows[0][-1]) if rows else 0
    return Claimed(columns, [row for row in rows if row[0] is not None], blocked)


@functools.lru_cache(maxsize=8)
def _names(raw: tuple[bytes | None, ...]) -> tuple[str, ...]:
    return tuple((name or b"").decode() for name in raw)


def _columns(cursor: Any) -> tuple[str, ...]:
    """The names of the claim's columns, decoded once per shape of result.

    ``cursor.description`` builds a column object per column on every claim: with the
    claim's 43 columns that cost more than building the claimed Job (on a loaded machine,
    taking turns: a claim's worker CPU 813 µs before, 636 after; docs/benchmarks.md). The
    names stay read from each result, so a claim whose columns changed (a migration)
    still meets ``claiming.layout``'s check.
    """
    result = cursor.pgresult
    if result is None:
        return tuple(column.name for column in cursor.description or ())
    return _names(tuple(result.fname(index) for index in range(result.nfields)))


def hold_back(
    alias: str,
    queues: Sequence[str] | None,
    scan: int,
    min_priority: int | None = None,
) -> int:
    """ready → blocked for the held jobs among the next ``scan`` due jobs, claiming none.

    A claim that meets held jobs blocks only those in its own batch; when thousands wait
    at the head of the claim order (a paused queue, a busy key), this moves them out of
    the way in a few statements instead of many claims. It is the claim itself, asked for
    no job (the one place flow control decides). Returns how many it blocked.
    """
    return claim(alias, "", queues, 0, min_priority, scan=scan).blocked
