"""The end of an attempt: running → done | ready | failed | cancelled, the attempt given back
(release), its progress and start, and the rescue of attempts whose worker is gone. Every
statement here is fenced on the attempt (``Fence``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import transaction

from ..serialization import storable_error, storable_text
from ..statuses import AttemptOutcome, EndStatus
from .cursors import batch_cursor, cursor_of
from .fence import Fence

REAPER_LOCK_KEY = 0x70716A6F6273  # "pqjobs": one rescuer at a time across all workers
# How many times a rescue gives back an attempt that never started, per job; after that
# such attempts count like any other.
GIVE_BACK_LIMIT = 3


# --- running → done ----------------------------------------------------------------------

# pqjobs_complete() (migration 0014): planned once per server session. The attempts travel
# as one JSON document (text the worker writes), not as five arrays: psycopg built arrays
# element by element in Python, which cost more than the statement.
_COMPLETE = "SELECT pqjobs_complete(%s, %s::jsonb)"


@dataclass(frozen=True)
class Completion:
    """A successful attempt waiting to be recorded (JSON already checked by the worker)."""

    fence: Fence
    result_json: str | None
    duration_ms: int
    progress_json: str | None = None


def _done_entry(c: Completion) -> str:
    """One attempt in pqjobs_complete()'s argument: [job id, attempt, duration in ms, result,
    progress, tid]. The result and progress (JSON text the worker has checked) travel as JSON
    strings, so that whatever they hold, they cannot change the document around them; a tid
    is "(page,item)"."""
    # a tid is "(page,item)" as PostgreSQL wrote it: nothing in it to escape
    tid = "null" if c.fence.tid is None else '"' + c.fence.tid + '"'
    return (
        f"[{c.fence.job_id},{c.fence.attempt},{c.duration_ms},{_json_string(c.result_json)},"
        f"{_json_string(c.progress_json)},{tid}]"
    )


def _json_string(text: str | None) -> str:
    return "null" if text is None else json.dumps(text)


def complete_many(alias: str, completions: Sequence[Completion]) -> set[int]:
    """running → done for many attempts of one worker in one statement.

    Returns the ids recorded; an attempt missing from it was no longer ours (fenced off).
    """
    if not completions:
        return set()
    worker_ids = {c.fence.worker_id for c in completions}
    if len(worker_ids) != 1:
        raise ValueError(f"complete_many takes one worker's attempts, got {sorted(worker_ids)}")
    done = ",".join(_done_entry(c) for c in completions)
    with batch_cursor(alias) as cursor:
        cursor.execute(_COMPLETE, [worker_ids.pop(), f"[{done}]"])
        return {int(row[0]) for row in cursor.fetchall()}


def complete(alias: str, completion: Completion) -> bool:
    """running → done for one attempt. False if it was no longer ours (fenced off)."""
    return completion.fence.job_id in complete_many(alias, [completion])


# --- running → ready | failed | cancelled ------------------------------------------------

_END_ATTEMPT = """
WITH ended AS (
    UPDATE pqjobs_job
    SET status = CASE
            WHEN %(final)s = 'auto' AND attempts < max_attempts THEN 'ready'
            WHEN %(final)s = 'auto' THEN 'failed'
            ELSE %(final)s END,
        run_after = CASE
            WHEN %(final)s = 'auto' AND attempts < max_attempts
            THEN now() + make_interval(secs => %(delay)s) ELSE run_after END,
        finished_at = CASE
            WHEN %(final)s = 'auto' AND attempts < max_attempts THEN NULL ELSE now() END,
        last_error = %(error)s, error_type = %(error_type)s, duration_ms = %(duration_ms)s,
        heartbeat_at = NULL, updated_at = now()
    WHERE id = %(id)s AND status = 'running' AND locked_by = %(worker)s
      AND attempts = %(attempt)s
    RETURNING id, status, locked_at
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, %(attempt)s, %(worker)s, locked_at, now(), %(outcome)s, %(error_type)s, %(error)s
    FROM ended
)
SELECT status FROM ended
"""


def end_attempt(
    alias: str,
    fence: Fence,
    *,
    outcome: AttemptOutcome | str,
    error_type: str,
    error: str,
    duration_ms: int | None,
    delay: float = 0.0,
    final: EndStatus = "auto",
) -> str | None:
    """End an attempt that did not succeed and add it to the attempt history.

    ``final="auto"``: back to ``ready`` after ``delay`` seconds while attempts remain, else
    ``failed`` (the dead-letter state). ``final="failed"`` / ``"cancelled"`` forces that
    status. Returns the job's new status, or None if the attempt was fenced off. Error texts
    are stored sanitised (NUL characters escaped) and capped at 10 KB.
    """
    if final not in ("auto", "failed", "cancelled"):
        raise ValueError(f"final must be 'auto', 'failed' or 'cancelled', got {final!r}")
    with cursor_of(alias) as cursor:
        cursor.execute(
            _END_ATTEMPT,
            {
                "final": final,
                "delay": float(delay),
                "error": storable_error(error),
                "error_type": storable_text(error_type)[:200],
                "duration_ms": duration_ms,
                "id": fence.job_id,
                "worker": fence.worker_id,
                "attempt": fence.attempt,
                "outcome": str(outcome),
            },
        )
        row = cursor.fetchone()
    return None if row is None else str(row[0])


# --- running → ready, the attempt given back ---------------------------------------------

_RELEASE = """
WITH released AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', attempts = j.attempts - 1,
        run_after = now() + make_interval(secs => %(delay)s), heartbeat_at = NULL,
        updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS t(id, attempt)
    WHERE j.id = t.id AND j.status = 'running' AND j.locked_by = %(worker)s
      AND j.attempts = t.attempt
      -- given back for this reason fewer than %(limit)s times in a row: the attempt number
      -- is used again, so its history rows of this reason are that streak
      AND (%(limit)s::integer IS NULL OR (
          SELECT count(*) FROM pqjobs_attempt a
          WHERE a.job_id = j.id AND a.attempt = t.attempt AND a.error_type = %(error_type)s
      ) < %(limit)s::integer)
    RETURNING j.id, t.attempt, j.locked_at
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, attempt, %(worker)s, locked_at, now(), 'released', %(error_type)s, %(error)s
    FROM released
)
SELECT id FROM released
"""

SHUTDOWN = "WorkerShutdown"
SHUTDOWN_NOTE = "the worker shut down before the job finished; the attempt was given back"


def release(
    alias: str,
    fences: Sequence[Fence],
    *,
    error_type: str = SHUTDOWN,
    error: str = SHUTDOWN_NOTE,
    delay: float = 0.0,
    limit: int | None = None,
) -> list[int]:
    """running → ready, giving the attempt back (it does not count): at shutdown, and for
    an attempt its database connection failed under (``error_type`` says which).

    The job is due again after ``delay`` seconds. With ``limit``, an attempt already given
    back ``limit`` times for this ``error_type`` is not given back again (its id is missing
    from the result, as is a fenced-off one's): the caller then charges it. Returns the
    ids given back.
    """
    if not fences:
        return []
    with cursor_of(alias) as cursor:
        cursor.execute(
            _RELEASE,
            {
                "ids": [f.job_id for f in fences],
                "attempts": [f.attempt for f in fences],
                "worker": fences[0].worker_id,
                "delay": float(delay),
                "limit": limit,
                "error_type": error_type,
                "error": storable_error(error),
            },
        )
        return [int(r[0]) for r in cursor.fetchall()]


def save_progress(alias: str, fence: Fence, progress_json: str) -> bool:
    """Record a running attempt's progress (JSON checked by the caller)."""
    with cursor_of(alias) as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET progress = %s::jsonb, updated_at = now() "
            "WHERE id = %s AND status = 'running' AND locked_by = %s AND attempts = %s",
            [progress_json, fence.job_id, fence.worker_id, fence.attempt],
        )
        return bool(cursor.rowcount == 1)


_MARK_STARTED = """
UPDATE pqjobs_job AS j
SET started_at = now()
FROM unnest(%s::bigint[], %s::int[]) AS t(id, attempt)
WHERE j.id = t.id AND j.status = 'running' AND j.locked_by = %s AND j.attempts = t.attempt
"""


def mark_started(alias: str, fences: Sequence[Fence]) -> None:
    """Record that the handlers of these attempts started (one worker's, one statement).

    A rescue gives back the attempt of a job whose current attempt never started (a job a
    killed worker had claimed ahead but not run), and counts it otherwise.
    """
    if not fences:
        return
    with cursor_of(alias) as cursor:
        cursor.execute(
            _MARK_STARTED,
            [[f.job_id for f in fences], [f.attempt for f in fences], fences[0].worker_id],
        )


# --- rescue: running (worker gone) → ready | failed | cancelled ---------------------------

_RESCUE = """
WITH stale AS (
    SELECT j.id, j.attempts AS attempt,
           -- the attempt counts if its handler started, or once attempts of this job
           -- have been given back %(give_back)s times (a handler that kills its worker
           -- before its start is recorded must not run for ever)
           (j.started_at IS NOT NULL AND j.started_at >= j.locked_at)
           OR (SELECT count(*) FROM pqjobs_attempt a
               WHERE a.job_id = j.id AND a.error_type = 'WorkerLostBeforeStart')
              >= %(give_back)s AS charged
    FROM pqjobs_job j
    WHERE j.status = 'running'
      AND (j.heartbeat_at IS NULL
           OR j.heartbeat_at < now() - make_interval(secs => %(stale)s)
           OR (j.timeout_seconds IS NOT NULL
               AND j.locked_at < now() - make_interval(secs => j.timeout_seconds + %(stale)s)))
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
), rescued AS (
    UPDATE pqjobs_job AS j
    SET status = CASE
            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN stale.charged AND j.attempts >= j.max_attempts THEN 'failed'
            ELSE 'ready' END,
        -- an attempt is given back by allowing one more, never by reusing its number:
        -- attempt numbers fence the outcomes of a worker that may still be alive
        max_attempts = CASE WHEN stale.charged THEN j.max_attempts ELSE j.max_attempts + 1 END,
        run_after = now(),
        finished_at = CASE
            WHEN j.cancel_requested_at IS NOT NULL
                 OR (stale.charged AND j.attempts >= j.max_attempts)
            THEN now() END,
        last_error = CASE
            WHEN stale.charged
            THEN 'worker ' || COALESCE(j.locked_by, '?')
                 || ' stopped heartbeating while running attempt ' || j.attempts
                 || ' (last heartbeat ' || COALESCE(j.heartbeat_at::text, 'never') || ')'
            ELSE 'worker ' || COALESCE(j.locked_by, '?') || ' stopped before attempt '
                 || j.attempts || ' started; it does not count (max_attempts + 1)' END,
        error_type = CASE WHEN stale.charged THEN 'WorkerLost' ELSE 'WorkerLostBeforeStart' END,
        heartbeat_at = NULL, updated_at = now()
    FROM stale
    WHERE j.id = stale.id
    RETURNING j.id, j.job_type, j.status, stale.attempt, j.locked_by, j.locked_at,
              j.last_error, j.error_type
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, attempt, COALESCE(locked_by, ''), locked_at, now(), 'lost', error_type,
           last_error
    FROM rescued
)
SELECT id, job_type, status, attempt, locked_by, error_type = 'WorkerLost' FROM rescued
ORDER BY id
"""


@dataclass(frozen=True)
class Rescued:
    job_id: int
    job_type: str
    status: str
    attempt: int
    worker_id: str | None
    charged: bool = True  # False: the attempt never started and was given back


def rescue_stale(alias: str, stale_after: float) -> list[Rescued] | None:
    """Give back running jobs whose worker stopped heartbeating ``stale_after`` seconds ago.

    They go to ``ready`` (or ``failed`` when no attempts are left, ``cancelled`` when a
    cancel was requested). An attempt whose handler never started (see
    :func:`mark_started`) is given back instead of counted. Only one rescuer runs at a time
    across all workers: returns None when another holds the lock. Forgets workers that
    stopped heartbeating as well.
    """
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [REAPER_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(_RESCUE, {"stale": float(stale_after), "give_back": GIVE_BACK_LIMIT})
        rows = cursor.fetchall()
        cursor.execute(
            "DELETE FROM pqjobs_worker WHERE heartbeat_at < now() - make_interval(secs => %s)",
            [float(stale_after)],
        )
    return [Rescued(int(r[0]), r[1], r[2], int(r[3]), r[4], bool(r[5])) for r in rows]
