"""What the queue looks like now, read from the tables: depth, lag, live workers.

Shared by the Prometheus metrics and the health checks. Every query reads only the rows it
counts, through the partial indexes on ``ready``, ``blocked``, ``waiting``, ``running`` and
``failed`` jobs: the cost grows with the jobs waiting and running, not with the finished
history (a table of millions of done jobs costs nothing extra), nor with the dead letters
(failed jobs are counted exactly up to :data:`FAILED_EXACT_UP_TO`, then estimated). A
statement timeout bounds each read.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from django.db import connections, transaction
from django.db.backends.utils import CursorWrapper

from .conf import conf
from .sql import queries

QUERIES = queries("monitoring")

READ_TIMEOUT_MS = 5000

# Failed jobs stay until pruned (30 days by default): a million of them is no incident, and
# counting them all made a scrape a hundred times slower (docs/benchmarks.md, metrics beside
# dead letters). Up to this many they are counted exactly.
FAILED_EXACT_UP_TO = 10_000

# One arm per status, so each is served by its partial index (claim, blocked, waiting,
# running, failed) however many finished rows the table holds. Ages are differences of
# epochs, not of timestamps: a run_after of '-infinity' written behind our back is an
# infinite age, where "now() - run_after" would fail the whole scrape. The failed arm reads only the
# newest FAILED_EXACT_UP_TO + 1 failed jobs, newest first through their index; the expired
# arm the jobs that expired in the last 24 hours (a range of the finished-jobs index).
_DEPTH = QUERIES["depth"]
_FAILED_ESTIMATE = "EXPLAIN (FORMAT JSON) SELECT 1 FROM pqjobs_job WHERE status = 'failed'"


@dataclass(frozen=True)
class Depth:
    """Jobs of one queue, type and status (ready, blocked, waiting, running, failed, or
    expired in the last 24 hours)."""

    queue: str
    job_type: str
    status: str
    count: int
    due: int  # ready jobs whose run_after has come (0 for the other statuses)
    # how long the oldest due job has waited (ready and blocked jobs; None for the others)
    oldest_due_seconds: float | None
    blocked_by: str | None = None  # what holds blocked jobs back: limit, rate or paused
    estimated: bool = False  # failed jobs past FAILED_EXACT_UP_TO: see depth()


def depth(alias: str | None = None) -> list[Depth]:
    """Ready (and due), blocked (per ``blocked_by``), waiting, running and failed jobs per
    queue and job type, and those that expired in the last 24 hours.

    Failed jobs are counted exactly while there are at most :data:`FAILED_EXACT_UP_TO`.
    Past that their counts are ``estimated``: the planner's estimate of all failed jobs,
    shared out in the proportions of the newest ``FAILED_EXACT_UP_TO``.
    """
    with _reading(alias) as cursor:
        cursor.execute(_DEPTH, [FAILED_EXACT_UP_TO + 1])
        found = [
            Depth(
                r[0],
                r[1],
                r[2],
                int(r[4]),
                int(r[5]),
                None if r[6] is None else float(r[6]),
                blocked_by=r[3],
            )
            for r in cursor.fetchall()
        ]
        failed = sum(row.count for row in found if row.status == "failed")
        if failed <= FAILED_EXACT_UP_TO:
            return found
        cursor.execute(_FAILED_ESTIMATE)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    # statistics older than the dead letters may estimate fewer than were just read
    scale = max(int(plan[0]["Plan"]["Plan Rows"]), failed) / failed
    return [
        replace(row, count=round(row.count * scale), estimated=True)
        if row.status == "failed"
        else row
        for row in found
    ]


def _holds_for_capacity(row: Depth) -> bool:
    """A due job that waits for a worker or for room under a concurrency or rate limit."""
    return row.status == "ready" or (row.status == "blocked" and row.blocked_by != "paused")


def lag_by_queue(rows: list[Depth]) -> dict[str, float]:
    """Per queue, how long its oldest due job has waited for a worker, or for room under a
    concurrency or rate limit (0 when none is due). Jobs a pause holds are not counted:
    see :func:`paused_lag_by_queue`."""
    return _oldest(row for row in rows if _holds_for_capacity(row))


def paused_lag_by_queue(rows: list[Depth]) -> dict[str, float]:
    """Per queue, how long the oldest job held by a pause (of the queue or of the job's
    type) has waited since it was due."""
    return _oldest(row for row in rows if row.status == "blocked" and row.blocked_by == "paused")


def _oldest(rows: Iterable[Depth]) -> dict[str, float]:
    lag: dict[str, float] = {}
    for row in rows:
        lag[row.queue] = max(lag.get(row.queue, 0.0), row.oldest_due_seconds or 0.0)
    return lag


# Ready jobs walk the claim index; jobs held by a limit or rate the blocked-jobs index.
_LAG = QUERIES["lag"]


def oldest_due_seconds(alias: str | None = None, queues: list[str] | None = None) -> float:
    """How long the oldest due job (of ``queues``, default all) has waited for a worker, or
    for room under a concurrency or rate limit; 0 if none. Jobs a pause holds do not count
    (see :func:`held_by_pause`).

    Cheaper than :func:`depth` for one number.
    """
    sql = _LAG.replace("{queue_filter}", "AND queue = ANY(%(queues)s)" if queues else "")
    rows = read(alias, sql, {"queues": queues} if queues else {})
    value = rows[0][0] if rows else None
    return 0.0 if value is None else max(0.0, float(value))


_HELD_BY_PAUSE = QUERIES["held_by_pause"]


def held_by_pause(alias: str | None = None, queues: list[str] | None = None) -> int:
    """How many jobs (of ``queues``, default all) a paused queue or job type holds now."""
    sql = _HELD_BY_PAUSE.replace("{queue_filter}", "AND queue = ANY(%s)" if queues else "")
    rows = read(alias, sql, [queues] if queues else [])
    return int(rows[0][0]) if rows else 0


# A range of the finished-jobs index.
_EXPIRED_LATELY = QUERIES["expired_lately"]


def expired_lately(
    alias: str | None = None, queues: list[str] | None = None, seconds: float = 3600.0
) -> int:
    """How many jobs (of ``queues``, default all) expired in the last ``seconds``: their
    deadline passed before a worker could start them."""
    sql = _EXPIRED_LATELY.replace("{queue_filter}", "AND queue = ANY(%s)" if queues else "")
    rows = read(alias, sql, [seconds, queues] if queues else [seconds])
    return int(rows[0][0]) if rows else 0


@dataclass(frozen=True)
class LeftBehind:
    """The jobs a worker leaves in its queues (see :func:`left_behind`)."""

    due: int  # ready and due now: the next worker takes them at once
    due_from_schedules: int  # ... of which schedules enqueued (a tick fired as it stopped)
    retries: int  # ready, waiting out the backoff before their next attempt
    retry_in: float | None  # seconds until the first of them is due
    delayed: int  # ready, never tried, enqueued to run later
    delayed_in: float | None
    paused: int  # held by a paused queue or job type
    limited: int  # held by a concurrency or rate limit

    def __bool__(self) -> bool:
        return any((self.due, self.retries, self.delayed, self.paused, self.limited))


# Seconds are differences of epochs: a run_after of 'infinity' is an infinite wait, not an
# error. Ready and blocked rows only, through their partial indexes.
_LEFT_BEHIND = QUERIES["left_behind"]


def left_behind(
    alias: str | None = None, queues: list[str] | None = None, min_priority: int | None = None
) -> LeftBehind:
    """The ready and blocked jobs of ``queues`` (default all) of at least ``min_priority``:
    what a worker that stops now (``run_jobs --burst``) leaves for the next one."""
    sql = _LEFT_BEHIND.replace(
        "{queue_filter}", "AND queue = ANY(%(queues)s)" if queues else ""
    ).replace("{priority_filter}", "" if min_priority is None else "AND priority >= %(floor)s")
    [row] = read(alias, sql, {"queues": queues, "floor": min_priority})
    return LeftBehind(
        int(row[0]),
        int(row[1]),
        int(row[2]),
        None if row[3] is None else float(row[3]),
        int(row[4]),
        None if row[5] is None else float(row[5]),
        int(row[6]),
        int(row[7]),
    )


@dataclass(frozen=True)
class WorkerState:
    worker_id: str
    hostname: str
    pid: int | None
    concurrency: int
    started_at: datetime
    heartbeat_age: float  # seconds since its last heartbeat
    loop_age: float | None  # seconds since its claim loop last ran (None: not reported yet)
    heartbeat_at: datetime | None = None
    queues: tuple[str, ...] | None = None  # None: every queue
    # The bounds of its live concurrency (None: a row an older worker wrote)
    started_concurrency: int | None = None
    max_concurrency: int | None = None


_WORKERS = QUERIES["workers"]


def workers(alias: str | None = None) -> list[WorkerState]:
    """Every worker in the worker table (live or not: see :func:`is_live`)."""
    return [
        WorkerState(
            r[0],
            r[1],
            r[2],
            int(r[3]),
            r[4],
            max(0.0, float(r[5])),
            None if r[6] is None else max(0.0, float(r[6])),
            r[7],
            _queue_names(r[8]),
            None if r[9] is None else int(r[9]),
            None if r[10] is None else int(r[10]),
        )
        for r in read(alias, _WORKERS, [])
    ]


def _queue_names(value: Any) -> tuple[str, ...] | None:
    """The worker's queues column (jsonb: raw cursors may return it as text)."""
    if isinstance(value, str):
        value = json.loads(value)
    return tuple(str(name) for name in value) if value else None


# A standby that has replayed all it received is as current as the primary's last change,
# however long ago that was: its lag is 0, not the age of the last transaction.
_READ_LAG = QUERIES["read_lag"]


def read_lag(alias: str) -> float | None:
    """How many seconds ``alias`` (a streaming replica, as ``READ_DATABASE`` may be) is
    behind its primary; None when it is not a standby (``DATABASE`` is not asked)."""
    if alias == conf.DATABASE:
        return None
    (seconds,) = read(alias, _READ_LAG, [])[0]
    return None if seconds is None else float(seconds)


def group_of(worker_id: str) -> str | None:
    """The worker group a worker id belongs to: ``<group>`` for ``<group>-<n>``, as
    ``run_jobs --processes N --worker-id <group>`` names its processes (else None)."""
    prefix, _, number = worker_id.rpartition("-")
    return prefix if prefix and number.isdigit() else None


def worker_names(worker_ids: Iterable[str]) -> list[str]:
    """These worker ids and the worker groups they belong to, sorted."""
    ids = set(worker_ids)
    return sorted(ids | {group for worker_id in ids if (group := group_of(worker_id))})


def closest_worker_name(name: str, worker_ids: Iterable[str]) -> str | None:
    """The worker id or worker group of ``worker_ids`` closest to ``name`` (a likely typo of
    it), or None when none is close."""
    close = difflib.get_close_matches(name, worker_names(worker_ids), n=1)
    return close[0] if close else None


def live_after() -> float:
    """Heartbeat age past which a worker no longer counts as live: three heartbeats."""
    return 3 * min(conf.HEARTBEAT_INTERVAL, conf.STALE_TIMEOUT / 3)


def is_live(worker: WorkerState, max_age: float | None = None) -> bool:
    """Whether ``worker`` heartbeated within ``max_age`` seconds (default
    :func:`live_after`): what ``jobs_health``, the health view and the dashboard call live."""
    return worker.heartbeat_age <= (live_after() if max_age is None else max_age)


@contextmanager
def _reading(alias: str | None) -> Iterator[CursorWrapper]:
    """A cursor in a transaction whose statement timeout ends with it."""
    alias = alias or conf.DATABASE
    connection = connections[alias]
    nested = connection.in_atomic_block
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        cursor.execute(QUERIES["set_timeout"], [str(READ_TIMEOUT_MS)])
        yield cursor
        if nested:  # the timeout would last until the caller's transaction ends
            cursor.execute(QUERIES["default_timeout"])


def read(alias: str | None, sql: str, params: Any) -> list[tuple[Any, ...]]:
    """Run one read of ``alias`` under a statement timeout that ends with it (the queue's
    other observers, ``fairness.fair_keys``, read this way too)."""
    with _reading(alias) as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())
