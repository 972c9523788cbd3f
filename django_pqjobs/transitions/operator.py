"""Operators' transitions: cancel, a duplicate replaced, retry (requeue), run now, force a
release, delete."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction

from ..notify import notify_jobs
from ..sql import queries
from .attempts import give_back
from .cursors import cursor_of
from .fence import Fence
from .history import unshelve

QUERIES = queries("operator")
# the error type of an attempt an operator gave back (force_release)
RELEASED_BY_OPERATOR = "ReleasedByOperator"
# (the hot table's part of the unique index of dedupe keys: a job changes status there)
_DEDUPE_INDEX = "pqjobs_job_hot_unique_key"
_KEY_RACE_TRIES = 3


@dataclass(frozen=True)
class Cancelled:
    cancelled: list[int]  # were waiting, ready or blocked: now cancelled
    cancel_requested: list[int]  # were running: their handler / child is asked to stop


def cancel_many(alias: str, job_ids: Sequence[int]) -> Cancelled:
    """waiting / ready / blocked → cancelled; running → cancel requested. Finished jobs are
    left alone.

    Each UPDATE re-checks the status under the row lock, so a job claimed by a worker in
    the meantime gets a cancel request instead of losing its running attempt.
    """
    ids = list(job_ids)
    with cursor_of(alias) as cursor:
        cursor.execute(
            QUERIES["cancel"],
            [ids],
        )
        cancelled = sorted(int(r[0]) for r in cursor.fetchall())
        cursor.execute(
            QUERIES["request_cancel"],
            [ids],
        )
        requested = sorted(int(r[0]) for r in cursor.fetchall())
    return Cancelled(cancelled, requested)


def skip_many(alias: str, job_ids: Sequence[int]) -> list[int]:
    """failed → cancelled (Skip): the jobs that halt on a failed job (the rest of its
    sequence) go on, settled by the database at commit. Other statuses are left alone;
    returns the ids skipped."""
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        unshelve(cursor, job_ids, ("failed",))
        cursor.execute(QUERIES["skip"], [list(job_ids)])
        return sorted(int(r[0]) for r in cursor.fetchall())


def cancel(alias: str, job_id: int) -> str | None:
    """One job: ``"cancelled"``, ``"cancel_requested"``, or None (finished, unknown, or a
    cancel was already requested)."""
    result = cancel_many(alias, [job_id])
    if result.cancelled:
        return "cancelled"
    return "cancel_requested" if result.cancel_requested else None


def cancel_duplicates(
    cursor: Any, job_type: str, dedupe_keys: Sequence[str], unique_for: float | None = None
) -> list[int]:
    """ready / blocked → cancelled for the jobs newer ones replace (dedupe ``replace``):
    those holding the keys in the window a job enqueued now falls in (``unique_for``
    seconds; None: no window).

    Takes the enqueuer's cursor: the cancel commits or rolls back with the new jobs.
    Returns the ids cancelled.
    """
    cursor.execute(
        QUERIES["cancel_duplicates"],
        {"type": job_type, "keys": list(dedupe_keys), "period": unique_for},
    )
    return [int(row[0]) for row in cursor.fetchall()]


def push_back(
    cursor: Any,
    job_id: int,
    payload_json: str,
    payload_version: int | None,
    debounce: float,
    cap: float | None,
) -> bool:
    """ready / blocked, stays so: a debounced duplicate's payload (and the version of its
    shape), and due ``debounce`` seconds from now (at most ``cap`` seconds after the job was
    enqueued). False if the job was no longer pending."""
    cursor.execute(
        QUERIES["push_back"],
        {
            "id": job_id,
            "payload": payload_json,
            "version": payload_version,
            "debounce": debounce,
            "cap": cap,
        },
    )
    return cursor.fetchone() is not None


def let_go_of_key(cursor: Any, job_id: int) -> None:
    """running, stays so, without its dedupe key: a debounced duplicate takes the key (a
    job to run after this one)."""
    cursor.execute(QUERIES["let_go_of_key"], [job_id])


@dataclass(frozen=True, order=True)
class Requeued:
    """A job Retry put back to ``ready``."""

    job_id: int
    was: str  # failed or cancelled
    attempts: int  # attempts made so far: the next one is numbered attempts + 1
    max_attempts: int  # the new bound: attempts + the bound it had


def requeue_many(alias: str, job_ids: Sequence[int]) -> list[Requeued]:
    """failed / cancelled / expired → ready now (Retry), without a deadline; idle workers
    are woken.

    Attempts are not reset: numbering goes on from the job's last attempt, and the job gets
    as many new attempts as its last round allowed (``max_attempts`` becomes ``attempts +
    max_attempts - retried_from``; ``retried_from`` becomes ``attempts``, so the backoff
    starts over). The attempt history is kept. A job whose dependencies are still active
    (retried too) waits for them again (``waiting``); finished ones count as satisfied.
    """
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        unshelve(cursor, job_ids, ("failed", "cancelled", "expired"))
        rows = _requeue(alias, cursor, job_ids)
        _wait_again(cursor, [r.job_id for r in rows])
        notify_jobs(cursor, [r.job_id for r in rows])
        return rows


def _requeue(alias: str, cursor: Any, job_ids: Sequence[int]) -> list[Requeued]:
    # The statement leaves out a job whose key an active job holds, as of its snapshot; an
    # enqueue of that key committing meanwhile still collides, and the next try sees it.
    for attempt in range(1, _KEY_RACE_TRIES + 1):
        try:
            with transaction.atomic(using=alias):  # a savepoint to try again from
                cursor.execute(QUERIES["requeue"], [list(job_ids)])
                return sorted(
                    Requeued(int(r[0]), r[1], int(r[2]), int(r[3])) for r in cursor.fetchall()
                )
        except IntegrityError as exc:
            constraint = getattr(getattr(exc.__cause__, "diag", None), "constraint_name", None)
            if attempt == _KEY_RACE_TRIES or constraint != _DEDUPE_INDEX:
                raise
    raise AssertionError("unreachable")


def _wait_again(cursor: Any, job_ids: list[int]) -> None:
    cursor.execute(QUERIES["any_dependencies"], [job_ids])
    if cursor.fetchone() is None:
        return
    cursor.execute(QUERIES["lock_dependencies"], [job_ids])
    cursor.execute(QUERIES["wait_again"], [job_ids])


def requeue(alias: str, job_id: int) -> bool:
    return bool(requeue_many(alias, [job_id]))


@dataclass(frozen=True, order=True)
class MadeDue:
    """A ready job Run now moved to the head of the claim order."""

    job_id: int
    was_delayed: bool  # its run_after was in the future


def run_now_many(alias: str, job_ids: Sequence[int]) -> list[MadeDue]:
    """A ready job (delayed or already due) becomes the next one claimed among the jobs of
    its priority: ``run_after`` moves to just before the earliest ready job of that priority
    (or to now). Jobs of a higher priority still go first; blocked jobs stay held by flow
    control. Idle workers are woken."""
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["run_now"], [list(job_ids)])
        rows = sorted(MadeDue(int(r[0]), bool(r[1])) for r in cursor.fetchall())
        notify_jobs(cursor, [r.job_id for r in rows])
        return rows


def force_release(alias: str, fence: Fence, note: str) -> str | None:
    """running → ready at once for one stuck attempt, on an operator's word.

    Fenced: applies only while the job still runs that attempt on that worker. The
    attempt is recorded (outcome ``released``, error type ``ReleasedByOperator``, ``note``
    as its text) and given back (``max_attempts + 1``); the attempt number is not reused,
    so whatever the old worker records later is ignored. A job with a cancel request
    becomes ``cancelled`` instead. Returns the new status, or None if the fence no longer
    matched.
    """
    with cursor_of(alias) as cursor:
        released = give_back(
            cursor,
            fence.worker_id,
            [(fence.job_id, fence.attempt, None)],
            RELEASED_BY_OPERATOR,
            note,
            on_job=False,
        )
    return released[0].status if released else None


@dataclass(frozen=True, order=True)
class Deleted:
    """A job an operator deleted (with its attempt history)."""

    job_id: int
    job_type: str
    was: str


def delete_unless_running(alias: str, job_ids: Sequence[int]) -> list[Deleted]:
    """Delete jobs and their attempt history, except running ones.

    The status is checked under the row lock, so a job claimed between an operator's look
    and the delete is kept: rows never vanish under a worker.
    """
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["delete"], [list(job_ids)])
        deleted = sorted(Deleted(int(r[0]), r[1], r[2]) for r in cursor.fetchall())
        if deleted:  # the one delete cascade (sql/schema/history.sql)
            cursor.execute(QUERIES["forget"], [[d.job_id for d in deleted]])
        return deleted
