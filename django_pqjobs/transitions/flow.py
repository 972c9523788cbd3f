"""Flow control's transitions: ready → blocked (held back without claiming), and
blocked → ready (a new rate window, a resume). A job blocked by its concurrency key is
released by the database (sql/schema/flow.sql) when a slot is given back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction
from psycopg import ClientCursor

from ..notify import notify_queues
from ..sql import queries
from .claim import CLAIM_PLAN
from .cursors import cursor_of

QUERIES = queries("flow")


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
    sql = (
        QUERIES["hold_back"]
        .replace("{queue_filter}", "AND queue = ANY(%(queues)s)" if queues else "")
        .replace(
            "{priority_filter}",
            "AND priority >= %(min_priority)s" if min_priority is not None else "",
        )
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


def promote_rate_blocked(alias: str) -> int:
    """blocked (rate) → ready for as many jobs as their rate windows have room for now."""
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["promote_rate_blocked"])
        rows = cursor.fetchall()
        notify_queues(cursor, [row[0] for row in rows])
    return sum(int(row[1]) for row in rows)


def pause(alias: str, kind: str, name: str, paused_by: str = "") -> bool:
    """Pause a queue or a job type: no worker claims its jobs until :func:`resume`.
    Running jobs finish. False if it was paused already."""
    with cursor_of(alias) as cursor:
        cursor.execute(
            QUERIES["pause"],
            [kind, name, paused_by],
        )
        return cursor.fetchone() is not None


def resume(alias: str, kind: str, name: str) -> int | None:
    """Resume a paused queue or job type: its blocked jobs become ready (unless something
    else still pauses them) and idle workers are woken. Returns how many jobs were released,
    or None if it was not paused."""
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        cursor.execute(QUERIES["resume"], [kind, name])
        if cursor.fetchone() is None:
            return None
        cursor.execute(QUERIES["unblock_resumed"])
        rows = cursor.fetchall()
        notify_queues(cursor, [row[0] for row in rows])
    return sum(int(row[1]) for row in rows)


def release_unpaused(alias: str) -> int:
    """blocked (paused) → ready for jobs nothing pauses any more (a pause row deleted
    without :func:`resume`, e.g. by hand)."""
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["unblock_resumed"])
        rows = cursor.fetchall()
        notify_queues(cursor, [row[0] for row in rows])
    return sum(int(row[1]) for row in rows)
