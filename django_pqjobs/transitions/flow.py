"""Flow control's transitions out of blocked: blocked → ready (a new rate window, a
resume, a release the database missed); and pausing and resuming. Into blocked: at enqueue
(sql/schema/flow.sql) for jobs that could not start anyway, at a pause for the paused
queue's ready jobs, and in the claim (claim.py), the one place that decides who starts. A
job blocked by its concurrency key is released by the database (sql/schema/flow.sql) when a
slot is given back."""

from __future__ import annotations

from django.db import transaction

from ..notify import notify_queues
from ..sql import queries
from .cursors import cursor_of

QUERIES = queries("flow")
# The most ready jobs a pause blocks in its own transaction (a second or less of work); the
# claims hold the rest of a bigger backlog as they meet it.
HOLD_AT_PAUSE = 20_000


# --- flow control: blocked → ready -------------------------------------------------------
# A job blocked by its concurrency key is promoted by the trigger that frees its key's slot;
# the functions below release the jobs that rate windows and pauses held, and those whose
# release that trigger missed.


def promote_rate_blocked(alias: str) -> int:
    """blocked (rate) → ready for as many jobs as their rate windows have room for now."""
    return _promote(alias, QUERIES["promote_rate_blocked"])


def promote_limit_blocked(alias: str) -> int:
    """blocked (limit) → ready for as many jobs as their keys have room for now.

    The trigger that gives a slot back releases the next job of its key at once; a job
    held at enqueue while that happened (its INSERT's transaction still open) was invisible
    to it, and waits for this sweep."""
    return _promote(alias, QUERIES["promote_limit_blocked"])


def _promote(alias: str, statement: str) -> int:
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        # No sorts: the counts of a key's ready jobs read that key's index, whatever the
        # statistics (sql/queries/flow.sql).
        cursor.execute(QUERIES["no_sorts"])
        cursor.execute(statement)
        rows = cursor.fetchall()
        notify_queues(cursor, [row[0] for row in rows])
    return sum(int(row[1]) for row in rows)


def pause(alias: str, kind: str, name: str, paused_by: str = "") -> bool:
    """Pause a queue or a job type: no worker claims its jobs until :func:`resume`; its
    ready jobs are blocked at once. Running jobs finish. False if it was paused already."""
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        cursor.execute(QUERIES["pause"], [kind, name, paused_by])
        if cursor.fetchone() is None:
            return False
        cursor.execute(QUERIES["hold_paused"], {"kind": kind, "name": name, "most": HOLD_AT_PAUSE})
        return True


def resume(alias: str, kind: str, name: str) -> int | None:
    """Resume a paused queue or job type: its blocked jobs become ready (unless something
    else still pauses them) and idle workers are woken. Returns how many jobs were released,
    or None if it was not paused."""
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        cursor.execute(QUERIES["resume"], [kind, name])
        if cursor.fetchone() is None:
            return None
        return _promote(alias, QUERIES["unblock_resumed"])


def release_unpaused(alias: str) -> int:
    """blocked (paused) → ready for jobs nothing pauses any more (a pause row deleted
    without :func:`resume`, e.g. by hand)."""
    return _promote(alias, QUERIES["unblock_resumed"])
