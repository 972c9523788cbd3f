"""Operators' transitions: cancel, a duplicate replaced, retry (requeue), run now, force a
release, delete."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from ..notify import notify_jobs, notify_queues
from ..serialization import storable_error
from .cursors import cursor_of
from .fence import Fence


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
            "UPDATE pqjobs_job SET status = 'cancelled', finished_at = now(), updated_at = now() "
            "WHERE id = ANY(%s) AND status IN ('waiting', 'ready', 'blocked') RETURNING id",
            [ids],
        )
        cancelled = sorted(int(r[0]) for r in cursor.fetchall())
        cursor.execute(
            "UPDATE pqjobs_job SET cancel_requested_at = now(), updated_at = now() "
            "WHERE id = ANY(%s) AND status = 'running' AND cancel_requested_at IS NULL "
            "RETURNING id",
            [ids],
        )
        requested = sorted(int(r[0]) for r in cursor.fetchall())
    return Cancelled(cancelled, requested)


def cancel(alias: str, job_id: int) -> str | None:
    """One job: ``"cancelled"``, ``"cancel_requested"``, or None (finished, unknown, or a
    cancel was already requested)."""
    result = cancel_many(alias, [job_id])
    if result.cancelled:
        return "cancelled"
    return "cancel_requested" if result.cancel_requested else None


def cancel_duplicate(cursor: Any, job_type: str, dedupe_key: str) -> list[int]:
    """ready / blocked → cancelled for the job a newer one replaces (dedupe ``replace``).

    Takes the enqueuer's cursor: the cancel commits or rolls back with the new job. Returns
    the ids cancelled.
    """
    return cancel_duplicates(cursor, job_type, [dedupe_key])


def cancel_duplicates(cursor: Any, job_type: str, dedupe_keys: Sequence[str]) -> list[int]:
    """:func:`cancel_duplicate` for many keys in one statement (``enqueue_many``)."""
    cursor.execute(
        "UPDATE pqjobs_job SET status = 'cancelled', finished_at = now(), updated_at = now(), "
        "last_error = 'replaced by a newer job with the same dedupe_key' "
        "WHERE job_type = %s AND dedupe_key = ANY(%s) AND status IN ('ready', 'blocked') "
        "RETURNING id",
        [job_type, list(dedupe_keys)],
    )
    return [int(row[0]) for row in cursor.fetchall()]


@dataclass(frozen=True, order=True)
class Requeued:
    """A job Retry put back to ``ready``."""

    job_id: int
    was: str  # failed or cancelled
    attempts: int  # attempts made so far: the next one is numbered attempts + 1
    max_attempts: int  # the new bound: attempts + the bound it had


# Attempt numbers go on (they fence a worker that may still be alive, and keep the history
# readable): the job gets as many new attempts as its bound was. The cap keeps the column
# inside its 32 bits.
_REQUEUE = """
WITH old AS (
    SELECT id, status FROM pqjobs_job
    WHERE id = ANY(%s) AND status IN ('failed', 'cancelled')
    ORDER BY id
    FOR UPDATE
)
UPDATE pqjobs_job AS j
SET status = 'ready', retried_from = j.attempts,
    max_attempts = LEAST(j.attempts::bigint + GREATEST(j.max_attempts - j.retried_from, 1),
                         2147483647),
    run_after = now(), finished_at = NULL, cancel_requested_at = NULL, locked_by = NULL,
    locked_at = NULL, heartbeat_at = NULL, updated_at = now()
FROM old
WHERE j.id = old.id
RETURNING j.id, old.status, j.attempts, j.max_attempts
"""


def requeue_many(alias: str, job_ids: Sequence[int]) -> list[Requeued]:
    """failed / cancelled → ready now (Retry); idle workers are woken.

    Attempts are not reset: numbering goes on from the job's last attempt, and the job gets
    as many new attempts as its last round allowed (``max_attempts`` becomes ``attempts +
    max_attempts - retried_from``; ``retried_from`` becomes ``attempts``, so the backoff
    starts over). The attempt history is kept. A job whose dependencies are still active
    (retried too) waits for them again (``waiting``); finished ones count as satisfied.
    """
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        cursor.execute(_REQUEUE, [list(job_ids)])
        rows = sorted(Requeued(int(r[0]), r[1], int(r[2]), int(r[3])) for r in cursor.fetchall())
        _wait_again(cursor, [r.job_id for r in rows])
        notify_jobs(cursor, [r.job_id for r in rows])
        return rows


# A retried job that has dependencies still active (retried too, say) waits for them again.
# The dependencies are locked first (FOR SHARE: their status cannot change until this
# transaction commits), so the count taken by the next statement stays true and their
# finish, settled after this commit, sees the job waiting.
_LOCK_DEPENDENCIES = """
SELECT 1 FROM pqjobs_dependency d JOIN pqjobs_job p ON p.id = d.depends_on_id
WHERE d.job_id = ANY(%s) ORDER BY p.id FOR SHARE OF p
"""
_WAIT_AGAIN = """
UPDATE pqjobs_job AS j SET status = 'waiting', waiting_for = a.active
FROM (
    SELECT d.job_id, count(*) AS active FROM pqjobs_dependency d
    JOIN pqjobs_job p ON p.id = d.depends_on_id
    WHERE d.job_id = ANY(%s) AND p.status NOT IN ('done', 'failed', 'cancelled')
    GROUP BY d.job_id
) a
WHERE j.id = a.job_id AND j.status = 'ready'
"""


def _wait_again(cursor: Any, job_ids: list[int]) -> None:
    cursor.execute("SELECT 1 FROM pqjobs_dependency WHERE job_id = ANY(%s) LIMIT 1", [job_ids])
    if cursor.fetchone() is None:
        return
    cursor.execute(_LOCK_DEPENDENCIES, [job_ids])
    cursor.execute(_WAIT_AGAIN, [job_ids])


def requeue(alias: str, job_id: int) -> bool:
    return bool(requeue_many(alias, [job_id]))


@dataclass(frozen=True, order=True)
class MadeDue:
    """A ready job Run now moved to the head of the claim order."""

    job_id: int
    was_delayed: bool  # its run_after was in the future


# The job is given a run_after just before the earliest ready job of its priority (or now,
# if that is later), so the next claim that reaches its priority takes it first. The
# earliest run_after of a priority is the first entry of the claim index for it.
_RUN_NOW = """
WITH target AS (
    SELECT j.id, j.priority, j.run_after > now() AS delayed FROM pqjobs_job j
    WHERE j.id = ANY(%s) AND j.status = 'ready'
    ORDER BY j.id
    FOR UPDATE
), head AS (
    SELECT t.id, t.delayed,
           (SELECT min(h.run_after) FROM pqjobs_job h
            WHERE h.status = 'ready' AND h.priority = t.priority) AS earliest
    FROM target t
)
UPDATE pqjobs_job AS j
SET run_after = LEAST(now(), head.earliest - interval '1 microsecond'), updated_at = now()
FROM head
WHERE j.id = head.id
RETURNING j.id, head.delayed
"""


def run_now_many(alias: str, job_ids: Sequence[int]) -> list[MadeDue]:
    """A ready job (delayed or already due) becomes the next one claimed among the jobs of
    its priority: ``run_after`` moves to just before the earliest ready job of that priority
    (or to now). Jobs of a higher priority still go first; blocked jobs stay held by flow
    control. Idle workers are woken."""
    with cursor_of(alias) as cursor:
        cursor.execute(_RUN_NOW, [list(job_ids)])
        rows = sorted(MadeDue(int(r[0]), bool(r[1])) for r in cursor.fetchall())
        notify_jobs(cursor, [r.job_id for r in rows])
        return rows


# The attempt is given back by allowing one more, never by reusing its number: the worker
# that held it may still be alive, and its outcome must stay fenced off. A cancel requested
# meanwhile is honoured, as a rescue does.
_FORCE_RELEASE = """
WITH released AS (
    UPDATE pqjobs_job AS j
    SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'ready' END,
        max_attempts = LEAST(j.max_attempts::bigint + 1, 2147483647),
        run_after = now(),
        finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL THEN now() END,
        heartbeat_at = NULL, updated_at = now()
    WHERE j.id = %(id)s AND j.status = 'running' AND j.locked_by = %(worker)s
      AND j.attempts = %(attempt)s
    RETURNING j.id, j.status, j.locked_at, j.queue
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, %(attempt)s, %(worker)s, locked_at, now(), 'released', 'ReleasedByOperator',
           %(note)s
    FROM released
)
SELECT status, queue FROM released
"""


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
        cursor.execute(
            _FORCE_RELEASE,
            {
                "id": fence.job_id,
                "worker": fence.worker_id,
                "attempt": fence.attempt,
                "note": storable_error(note),
            },
        )
        row = cursor.fetchone()
        if row is None:
            return None
        if row[0] == "ready":
            notify_queues(cursor, [row[1]])
        return str(row[0])


@dataclass(frozen=True, order=True)
class Deleted:
    """A job an operator deleted (with its attempt history)."""

    job_id: int
    job_type: str
    was: str


_DELETE = """
WITH doomed AS (
    DELETE FROM pqjobs_job WHERE id = ANY(%s) AND status <> 'running'
    RETURNING id, job_type, status
), history AS (
    DELETE FROM pqjobs_attempt WHERE job_id IN (SELECT id FROM doomed)
), edges AS (
    -- what a deleted job waited for; the edges to a deleted job stay until its dependents
    -- are settled at commit (they are cancelled, or run, by their policy) and pruned
    DELETE FROM pqjobs_dependency WHERE job_id IN (SELECT id FROM doomed)
)
SELECT id, job_type, status FROM doomed
"""


def delete_unless_running(alias: str, job_ids: Sequence[int]) -> list[Deleted]:
    """Delete jobs and their attempt history, except running ones.

    The status is checked under the row lock, so a job claimed between an operator's look
    and the delete is kept: rows never vanish under a worker.
    """
    with cursor_of(alias) as cursor:
        cursor.execute(_DELETE, [list(job_ids)])
        return sorted(Deleted(int(r[0]), r[1], r[2]) for r in cursor.fetchall())
