"""Flow control's transitions: ready → blocked (held back without claiming), and
blocked → ready (a new rate window, a resume). A job blocked by its concurrency key is
released by the database (sql/schema/flow.sql) when a slot is given back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction
from psycopg import ClientCursor

from ..notify import notify_queues
from .claim import CLAIM_PLAN
from .cursors import cursor_of

_HOLD_BACK = """
WITH picked AS (
    SELECT id, queue, job_type, priority, run_after, concurrency_key, concurrency_limit,
           rate_key
    FROM pqjobs_job
    WHERE status = 'ready' AND run_after <= now() {queue_filter} {priority_filter}
    ORDER BY priority DESC, run_after, id
    LIMIT %(scan)s
    FOR UPDATE SKIP LOCKED
), numbered AS (
    SELECT p.*, row_number() OVER (ORDER BY p.priority DESC, p.run_after, p.id) AS ord,
           EXISTS (SELECT 1 FROM pqjobs_pause z WHERE z.kind = 'queue' AND z.name = p.queue)
           OR EXISTS (SELECT 1 FROM pqjobs_pause z
                      WHERE z.kind = 'job_type' AND z.name = p.job_type) AS paused
    FROM picked p
), rate_room AS (
    -- no lock needed: within a window the count only grows, so a stale read can only
    -- leave too many jobs ready (the next claim holds them), never hold one that could run
    SELECT r.key, greatest(r.allowance - CASE
            WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                     / r.period) * r.period)
            THEN r.used ELSE 0 END, 0) AS room
    FROM pqjobs_rate r WHERE r.key IN (SELECT rate_key FROM numbered WHERE NOT paused)
), rated AS (
    SELECT n.*, (n.rate_key IS NOT NULL AND row_number() OVER (
                    PARTITION BY n.rate_key ORDER BY n.ord)
                 > COALESCE((SELECT room FROM rate_room WHERE key = n.rate_key), 0)) AS over
    FROM numbered n WHERE NOT n.paused
), key_room AS (
    -- locked, and read as they are now: slots are given back by other transactions
    SELECT s.key, greatest(s.running, 0) AS running FROM pqjobs_key_slot s
    WHERE s.key IN (SELECT concurrency_key FROM rated WHERE NOT over)
    FOR UPDATE SKIP LOCKED
), limited AS (
    SELECT r.id FROM (
        SELECT r.id, r.concurrency_key, r.concurrency_limit,
               row_number() OVER (PARTITION BY r.concurrency_key ORDER BY r.ord) AS key_rank
        FROM rated r WHERE NOT r.over AND r.concurrency_key IS NOT NULL
    ) r JOIN key_room k ON k.key = r.concurrency_key
    WHERE r.key_rank > r.concurrency_limit - k.running
), held AS (
    UPDATE pqjobs_job AS j
    SET status = 'blocked', updated_at = now(),
        blocked_by = CASE WHEN n.paused THEN 'paused'
                          WHEN n.id IN (SELECT id FROM rated WHERE over) THEN 'rate'
                          ELSE 'limit' END
    FROM numbered n
    WHERE j.id = n.id
      AND (n.paused OR n.id IN (SELECT id FROM rated WHERE over)
           OR n.id IN (SELECT id FROM limited))
    RETURNING j.id
)
SELECT count(*) FROM held
"""


def hold_back(
    alias: str,
    queues: Sequence[str] | None,
    scan: int,
    min_priority: int | None = None,
) -> int:
    """ready → blocked for the held jobs among the next ``scan`` due jobs, claiming none.

    A claim that meets held jobs blocks only those in its own batch; when thousands wait
    at the head of the claim order (a paused queue, a busy key), this moves them out of
    the way in a few statements instead of many claims. Returns how many it blocked.
    """
    sql = _HOLD_BACK.replace(
        "{queue_filter}", "AND queue = ANY(%(queues)s)" if queues else ""
    ).replace(
        "{priority_filter}",
        "AND priority >= %(min_priority)s" if min_priority is not None else "",
    )
    params: dict[str, Any] = {"scan": scan}
    if queues:
        params["queues"] = list(queues)
    if min_priority is not None:
        params["min_priority"] = min_priority
    connection = connections[alias]
    connection.ensure_connection()
    with connection.wrap_database_errors, ClientCursor(connection.connection) as cursor:
        cursor.execute(f"{CLAIM_PLAN};\n{sql}", params)
        cursor.nextset()
        (held,) = cursor.fetchone() or (0,)
        return int(held)


# --- flow control: blocked → ready -------------------------------------------------------
# A job blocked by its concurrency key is promoted by the trigger that frees its key's slot
# (migration 0009); the functions below release the jobs that rate windows and pauses held.

_PROMOTE_RATE_BLOCKED = """
WITH room AS (
    SELECT r.key, r.allowance - CASE
            WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                     / r.period) * r.period)
            THEN r.used ELSE 0 END AS free
    FROM pqjobs_rate r
), promoted AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', blocked_by = NULL, updated_at = now()
    FROM (
        SELECT b.id FROM room, LATERAL (
            SELECT id FROM pqjobs_job
            WHERE status = 'blocked' AND blocked_by = 'rate' AND rate_key = room.key
            ORDER BY priority DESC, run_after, id
            LIMIT room.free
            FOR UPDATE SKIP LOCKED
        ) b
        WHERE room.free > 0
    ) p
    WHERE j.id = p.id
    RETURNING j.queue
)
SELECT queue, count(*) FROM promoted GROUP BY queue
"""


def promote_rate_blocked(alias: str) -> int:
    """blocked (rate) → ready for as many jobs as their rate windows have room for now."""
    with cursor_of(alias) as cursor:
        cursor.execute(_PROMOTE_RATE_BLOCKED)
        rows = cursor.fetchall()
        notify_queues(cursor, [row[0] for row in rows])
    return sum(int(row[1]) for row in rows)


_UNBLOCK_RESUMED = """
WITH released AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', blocked_by = NULL, updated_at = now()
    WHERE j.status = 'blocked' AND j.blocked_by = 'paused'
      AND NOT EXISTS (SELECT 1 FROM pqjobs_pause z
                      WHERE (z.kind = 'queue' AND z.name = j.queue)
                         OR (z.kind = 'job_type' AND z.name = j.job_type))
    RETURNING j.queue
)
SELECT queue, count(*) FROM released GROUP BY queue
"""


def pause(alias: str, kind: str, name: str, paused_by: str = "") -> bool:
    """Pause a queue or a job type: no worker claims its jobs until :func:`resume`.
    Running jobs finish. False if it was paused already."""
    with cursor_of(alias) as cursor:
        cursor.execute(
            "INSERT INTO pqjobs_pause (kind, name, paused_at, paused_by) "
            "VALUES (%s, %s, now(), %s) ON CONFLICT (kind, name) DO NOTHING RETURNING id",
            [kind, name, paused_by],
        )
        return cursor.fetchone() is not None


def resume(alias: str, kind: str, name: str) -> int | None:
    """Resume a paused queue or job type: its blocked jobs become ready (unless something
    else still pauses them) and idle workers are woken. Returns how many jobs were released,
    or None if it was not paused."""
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        cursor.execute(
            "DELETE FROM pqjobs_pause WHERE kind = %s AND name = %s RETURNING id", [kind, name]
        )
        if cursor.fetchone() is None:
            return None
        cursor.execute(_UNBLOCK_RESUMED)
        rows = cursor.fetchall()
        notify_queues(cursor, [row[0] for row in rows])
    return sum(int(row[1]) for row in rows)


def release_unpaused(alias: str) -> int:
    """blocked (paused) → ready for jobs nothing pauses any more (a pause row deleted
    without :func:`resume`, e.g. by hand)."""
    with cursor_of(alias) as cursor:
        cursor.execute(_UNBLOCK_RESUMED)
        rows = cursor.fetchall()
        notify_queues(cursor, [row[0] for row in rows])
    return sum(int(row[1]) for row in rows)
