"""Durable workflows' waits (``workflows.py``): running → waiting (``park``: a durable
sleep or a wait for a signal, the attempt given back uncharged, no worker held), and
waiting → ready (``wake_due`` when its time comes or the child job it waits for finished,
by every worker's maintenance sweep;
``wake_for_signal`` when its signal is sent; ``end_wait``, an operator's word).

A parked job is ``waiting`` with no dependency left (``waiting_for`` 0); ``run_after`` is
when it wakes. Jobs waiting for dependencies are never woken here: the database settles
them (``sql/schema/composition.sql``).
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from ..serialization import storable_error
from ..sql import queries
from .cursors import cursor_of
from .fence import Fence

QUERIES = queries("workflows")

SWEEP_BATCH = 1000
# Senders of a signal to a job and its park take turns on this lock (the job's id folded
# into an int4 key: two jobs sharing one only take turns).
SIGNAL_LOCK = "hashtext('pqjobs.signal'), (%s %% 2147483647)::integer"
# A park that met a signal's sender mid-transaction looks again this soon.
LOOK_AGAIN = 1.0


def park(
    alias: str, fence: Fence, delay: float, note: str, signal: str | None = None
) -> str | None:
    """running → waiting, uncharged, woken ``delay`` seconds from now or by its signal: the
    job's new status (``ready`` when the awaited ``signal`` came meanwhile), or None when
    the attempt was no longer this worker's.

    A wait for a signal and the signal's sender take turns on the job's lock
    (:data:`SIGNAL_LOCK`): whichever comes second sees the other's commit, so no signal is
    missed. A park that finds a sender's transaction still open looks again soon instead of
    waiting for it (:data:`LOOK_AGAIN`)."""
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        if signal is not None:
            cursor.execute(f"SELECT pg_try_advisory_xact_lock({SIGNAL_LOCK})", [fence.job_id])
            if not cursor.fetchone()[0]:
                delay = min(delay, LOOK_AGAIN)
        cursor.execute(
            QUERIES["park"],
            {
                "id": fence.job_id,
                "worker": fence.worker_id,
                "attempt": fence.attempt,
                "delay": float(delay),
                "note": storable_error(note),
                "signal": signal,
            },
        )
        row = cursor.fetchone()
        return None if row is None else str(row[0])


def wake_due(alias: str, batch: int = SWEEP_BATCH) -> list[tuple[int, str]]:
    """waiting → ready for up to ``batch`` parked jobs whose time came, and as many whose
    awaited child job finished; their (id, queue)."""
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["wake_due"], {"batch": batch})
        woken = cursor.fetchall()
        cursor.execute(QUERIES["wake_for_children"], {"batch": batch})
        woken += cursor.fetchall()
    return [(int(job_id), str(queue)) for job_id, queue in woken]


def wake_for_signal(cursor: Any, job_id: int, name: str) -> str | None:
    """waiting → ready for a job parked waiting for signal ``name``; its queue, or None
    when it was not waiting for it (in the caller's transaction)."""
    cursor.execute(QUERIES["wake_for_signal"], {"id": job_id, "name": name})
    row = cursor.fetchone()
    return None if row is None else str(row[0])


def end_wait(cursor: Any, job_id: int) -> tuple[str, list[tuple[str, str]]] | None:
    """waiting → ready for a parked job, its open waits over: (its queue, the (name, kind)
    of the waits ended), or None when it was not parked."""
    cursor.execute(QUERIES["end_wait"], {"id": job_id})
    rows = cursor.fetchall()
    if not rows:
        return None
    return str(rows[0][0]), [(str(name), str(kind)) for _, name, kind in rows if name]
