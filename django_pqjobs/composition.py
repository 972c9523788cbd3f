"""Composition at enqueue: the open batch new jobs join, and the edges of dependencies.

What happens later (a dependent released or cancelled, batch counts, callbacks) is done by
the database at the commit of whatever changes a member or a prerequisite
(sql/schema/composition.sql), so it holds for every path a job's status takes. This
module writes what those triggers read: ``pqjobs_job.batch_id`` and the batch's counts,
``pqjobs_dependency`` rows, ``waiting_for`` and ``has_dependents``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from . import transitions
from .errors import InvalidJobOption
from .sql import queries
from .statuses import ACTIVE_STATUSES, FINISHED_STATUSES

QUERIES = queries("composition")


@dataclass
class OpenBatch:
    """A batch being filled: the ``batch()`` block that created it is running."""

    id: int
    alias: str
    job_ids: list[int] = field(default_factory=list)


_open_batch: ContextVar[OpenBatch | None] = ContextVar("pqjobs_open_batch", default=None)


def current_batch() -> OpenBatch | None:
    """The batch jobs enqueued now join (inside a ``batch()`` block), or None."""
    return _open_batch.get()


@contextmanager
def filling(open_batch: OpenBatch) -> Iterator[OpenBatch]:
    """Make ``open_batch`` the one jobs enqueued in this context join."""
    if _open_batch.get() is not None:
        raise InvalidJobOption("batches do not nest: this block is already inside a batch()")
    token = _open_batch.set(open_batch)
    try:
        yield open_batch
    finally:
        _open_batch.reset(token)


def batch_for(alias: str) -> OpenBatch | None:
    """The open batch, checked to be on ``alias`` (a batch's members share its database)."""
    open_batch = _open_batch.get()
    if open_batch is not None and open_batch.alias != alias:
        raise InvalidJobOption(
            f"a job enqueued on database {alias!r} cannot join batch #{open_batch.id}, "
            f"which is on {open_batch.alias!r}"
        )
    return open_batch


def join_batch(cursor: Any, open_batch: OpenBatch, job_ids: Sequence[int]) -> None:
    """Make the just-inserted (still ready, uncommitted) jobs members of the batch."""
    cursor.execute(QUERIES["join_batch"], [open_batch.id, list(job_ids)])
    count_members(cursor, open_batch, job_ids)


def count_members(cursor: Any, open_batch: OpenBatch, job_ids: Sequence[int]) -> None:
    """Add jobs inserted with the batch's id to its counts (they are all still active)."""
    cursor.execute(
        QUERIES["count_members"],
        [len(job_ids), len(job_ids), open_batch.id],
    )
    open_batch.job_ids.extend(job_ids)


_FINAL = tuple(str(s) for s in FINISHED_STATUSES)

# The prerequisites are locked (in id order, so two enqueuers never deadlock) before their
# status is read: a prerequisite that finishes meanwhile does so after this transaction
# commits, and its commit then sees the new edge and has_dependents.
_LOCK_PREREQUISITES = QUERIES["lock_prerequisites"]
_MARK_PREREQUISITES = QUERIES["mark_prerequisites"]
_ADD_EDGES = QUERIES["add_edges"]


def depend(cursor: Any, job_id: int, depends_on: Sequence[int], policy: str, where: str) -> str:
    """Make the just-inserted (still ready, uncommitted) job wait for ``depends_on``.

    Prerequisites already done count as satisfied; one already failed or cancelled applies
    ``policy`` at once. Returns the job's status: ``waiting``, ``ready`` (nothing left to
    wait for) or ``cancelled``.
    """
    ids = sorted(set(depends_on))
    cursor.execute(_LOCK_PREREQUISITES, [ids])
    found = {int(r[0]): str(r[1]) for r in cursor.fetchall()}
    missing = [n for n in ids if n not in found]
    if missing:
        shown = ", ".join(f"#{n}" for n in missing[:10])
        raise InvalidJobOption(
            f"{where} depends_on: no job {shown}"
            + (f" (and {len(missing) - 10} more)" if len(missing) > 10 else "")
            + " (never enqueued, rolled back, or pruned)"
        )
    # a dependent that halts counts a failed prerequisite as unfinished: it waits for its
    # Retry (and success) or its Skip
    unfinished = [
        n for n in ids if found[n] not in _FINAL or (policy == "halt" and found[n] == "failed")
    ]
    bad = [n for n in ids if found[n] in ("failed", "cancelled", "expired")]
    cursor.execute(_MARK_PREREQUISITES, [unfinished])
    cursor.execute(_ADD_EDGES, [job_id, ids])
    status, error_type, error = "waiting", "", ""
    if bad and policy == "cancel":
        status, error_type = "cancelled", "DependencyFailed"
        error = f"dependency #{bad[0]} {_as_finished(found[bad[0]])}"
    elif not unfinished:
        status = "ready"
    transitions.make_wait(cursor, job_id, status, len(unfinished), policy, error_type, error)
    return status


def _as_finished(status: str) -> str:
    return {"failed": "failed", "expired": "expired"}.get(status, "was cancelled")


# Enqueuers of one sequence take turns on its row of pqjobs_sequence, from before the
# INSERT to their commit (the upsert locks the row; the next enqueuer then reads the id the
# last one wrote), so ids follow the order of the turns and each finds the job before it.
_SEQUENCE_TURN = QUERIES["sequence_turn"]
_SEQUENCE_NEXT = QUERIES["sequence_next"]
_SET_SEQUENCE = QUERIES["set_sequence"]
_STATUS = QUERIES["status"]
# What a job that left the sequence (cancelled, expired, deleted) waited for: its place in
# line (a deleted job's edges stay while it is its sequence's last job: pqjobs_job_forget).
_WAITED_FOR = QUERIES["waited_for"]
_STILL_IN_LINE = tuple(str(s) for s in ACTIVE_STATUSES)


def take_turn(cursor: Any, key: str) -> int | None:
    """Wait for this sequence's other enqueuers (until this transaction ends); returns the
    id of the job enqueued last in it (None: none yet)."""
    cursor.execute(_SEQUENCE_TURN, [key])
    last = cursor.fetchone()[0]
    return None if last is None else int(last)


def follow(
    cursor: Any, job_id: int, key: str, last: int | None, on_failure: str, where: str
) -> str:
    """Put the just-inserted (still ready, uncommitted) job at the end of sequence ``key``,
    after ``last`` (what :func:`take_turn`, called before the INSERT, returned): it waits
    for the job before it that still holds its place (a dependency whose policy is
    ``"halt"``, or ``"run"`` when the sequence continues past failures). Returns the job's
    status: ``waiting``, or ``ready`` (first in line)."""
    halt = on_failure == "halt"
    cursor.execute(_SET_SEQUENCE, [key, job_id])
    cursor.execute(_SEQUENCE_NEXT, [job_id, key])
    before = _in_line(cursor, last, halt)
    if before is None:
        return "ready"
    return depend(cursor, job_id, [before], "halt" if halt else "run", where)


def _in_line(cursor: Any, candidate: int | None, halt: bool) -> int | None:
    """The job the next one waits for, starting from the last enqueued: itself while it
    holds its place (not finished; failed, when the sequence halts), else (it was
    cancelled, expired or deleted) what it waited for, and so on; None once a job that ran
    to its end is met (the ones before it ended too)."""
    while candidate is not None:
        cursor.execute(_STATUS, [candidate])
        row = cursor.fetchone()
        status = None if row is None else str(row[0])
        if status in _STILL_IN_LINE or (status == "failed" and halt):
            return candidate
        if status in ("done", "failed"):
            return None
        cursor.execute(_WAITED_FOR, [candidate])
        found = cursor.fetchone()
        candidate = None if found is None else int(found[0])
    return None


def settle_now(alias: str) -> None:
    """Inside a transaction, do now what its commit would: release dependents, count
    batches, enqueue callbacks. For tests that never commit (Django's ``TestCase``)."""
    connection = connections[alias]
    if connection.in_atomic_block:
        with connection.cursor() as cursor:
            cursor.execute("SET CONSTRAINTS pqjobs_settle_at_commit IMMEDIATE")
            cursor.execute("SET CONSTRAINTS pqjobs_settle_at_commit DEFERRED")
