"""Flow control's transitions out of blocked: blocked → ready (a new rate window, a
resume); and pausing and resuming. Into blocked is the claim's (claim.py), the one place
flow control decides. A job blocked by its concurrency key is released by the database
(sql/schema/flow.sql) when a slot is given back."""

from __future__ import annotations

from django.db import transaction

from ..notify import notify_queues
from ..sql import queries
from .cursors import cursor_of

QUERIES = queries("flow")


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
