"""The job state machine: every statement that moves a job from one status to another.

    ready ──claim──► running ──complete──► done
      ▲                 │ ──end_attempt (attempts left)──► ready (run_after = now + backoff)
      │                 │ ──end_attempt (none left, or permanent)──► failed
      │                 │ ──end_attempt (cancel requested)──► cancelled
      ├──release────────┤   (shutdown, or its database connection died under the handler:
      │                 │    the attempt is given back, a bounded number of times in a row)
      ├──force_release──┤   (an operator's word: the attempt is given back, fenced)
      └──rescue─────────┘   (worker stopped heartbeating: ready, or failed if none left)
    ready ──cancel──► cancelled        ready ──cancel_duplicate──► cancelled (dedupe replace)
    ready ──claim (flow control holds it)──► blocked ──slot freed / new rate window /
                                                       resume──► ready
    failed / cancelled ──requeue──► ready (attempt numbers go on)
    ready ──run_now──► ready, first of its priority in the claim order
    running ──cancel──► running with a cancel request (the handler sees it)
    any status but running ──delete_unless_running──► (deleted, with its history)

Transitions out of ``running`` are *fenced* on ``(id, locked_by, attempts)``, the
:class:`Fence` of the attempt: a worker that lost its job (rescued and claimed again
elsewhere) cannot overwrite the newer outcome. The database clock (``now()``) is the only
clock. Everyone changes statuses through these functions: the worker, the admin, the
management commands and the public operations.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connections, transaction
from psycopg import ClientCursor

from .notify import notify_jobs, notify_queues
from .serialization import storable_error, storable_text
from .statuses import AttemptOutcome, EndStatus

if TYPE_CHECKING:
    from .models import Job

REAPER_LOCK_KEY = 0x70716A6F6273  # "pqjobs": one rescuer at a time across all workers
# How many times a rescue gives back an attempt that never started, per job; after that
# such attempts count like any other.
GIVE_BACK_LIMIT = 3


def _cursor(alias: str) -> Any:
    return connections[alias].cursor()


_kept = threading.local()  # per thread and alias: the psycopg cursor _batch_cursor keeps


@contextmanager
def _batch_cursor(alias: str) -> Iterator[Any]:
    """The cursor of the worker's two statements per claimed batch, the claim and the
    completion: the psycopg cursor of this thread's connection, made once and used again,
    with Django's translation of database errors.

    Django's cursor wrapper, made anew for each statement, cost a worker under a stream of
    enqueues more per batch than the rest of the statement's Python. What it adds is not
    wanted for statements sent a hundred times a second: query logging under ``DEBUG``
    (which would fill memory) and ``execute_wrapper`` instrumentation.
    """
    wrapper = connections[alias]
    wrapper.ensure_connection()
    connection = wrapper.connection
    cursor = getattr(_kept, alias, None)
    if cursor is None or cursor.connection is not connection or cursor.closed:
        cursor = connection.cursor()
        setattr(_kept, alias, cursor)
    with wrapper.wrap_database_errors:
        yield cursor


@dataclass(frozen=True)
class Fence:
    """One claimed attempt: which worker holds which attempt of which job.

    Every transition out of ``running`` applies only while the row still matches it.
    """

    job_id: int
    worker_id: str
    attempt: int
    # Where the row lay when this attempt was claimed ("(page,item)"), if known: the
    # completion looks there first (see pqjobs_complete()). A hint, not part of the fence.
    tid: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, job: Job, tid: str | None = None) -> Fence:
        assert job.locked_by is not None
        return cls(job.id, job.locked_by, job.attempts, tid)


# --- claim: ready → running ------------------------------------------------------------

# What a claim returns per job, in this order: the output of pqjobs_claim() (migration 0014
# writes the same list), from which ``worker/claiming.py`` builds the Job.
# Timestamps travel as epoch seconds: Django's timestamptz loader is pure Python and cost
# more per claimed job than everything else in the claim. A float8 holds today's epoch to
# a quarter of a microsecond, so the datetimes are exact. JSON travels as text, decoded
# by the worker one job at a time.
CLAIM_COLUMNS = (
    "id",
    "job_type",
    "queue",
    "payload::text",
    "priority",
    "attempts",
    "max_attempts",
    "timeout_seconds",
    "dedupe_key",
    "parent_id",
    "schedule_id",
    "last_error",
    "error_type",
    "result::text",
    "duration_ms",
    "progress::text",
    *(
        f"extract(epoch FROM {name})::float8"
        for name in (
            "run_after",
            "locked_at",
            "created_at",
            "finished_at",
            "cancel_requested_at",
            "started_at",
        )
    ),
    "concurrency_key",
    "concurrency_limit",
    "rate_key",
    "rate_limit",
    "rate_period",
    "trace_context::text",
    "retried_from",
    "batch_id",
    "callback_of_id",
    "waiting_for",
    "on_dependency_failure",
    "has_dependents",
    "waited_on",
    "ctid::text",  # where the claimed version of the row lies (Fence.tid)
)
# Settings for hold_back()'s transaction (pqjobs_claim() sets the same for itself): walk
# pqjobs_job_claim in order and stop after LIMIT rows, whatever the planner's statistics
# say; commit without waiting for the WAL flush (see pqjobs_claim() in migration 0014).
CLAIM_PLAN = (
    "SELECT set_config('enable_bitmapscan', 'off', true), "
    "set_config('enable_seqscan', 'off', true), "
    "set_config('synchronous_commit', 'off', true)"
)
# The claim is the PL/pgSQL function pqjobs_claim() (migration 0014): its plans are made
# once per server session instead of on every claim, and with no flow control in play it
# claims the jobs it locked where they lie (by TID).
_CLAIM = "SELECT * FROM pqjobs_claim(%s, %s::integer, %s::text[], %s::integer)"


@dataclass(frozen=True)
class Claimed:
    """What a claim did: the rows of the jobs it moved to ``running`` (columns of
    :data:`CLAIM_COLUMNS`), and how many due jobs it moved to ``blocked`` instead."""

    rows: list[tuple[Any, ...]]
    blocked: int


def claim(
    alias: str,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    min_priority: int | None = None,
) -> Claimed:
    """ready → running for up to ``limit`` due jobs, highest priority first.

    One statement, ``FOR UPDATE SKIP LOCKED``: concurrent claimers never get the same job.
    ``min_priority``: only jobs of at least that priority. Flow control applies in the same
    statement: a job whose queue or type is paused, whose rate is used up or whose
    concurrency key is at its limit becomes ``blocked`` instead.
    """
    if limit < 1:
        return Claimed([], 0)
    with _batch_cursor(alias) as cursor:
        cursor.execute(_CLAIM, [worker_id, limit, list(queues) if queues else None, min_priority])
        rows = cursor.fetchall()
    blocked = int(rows[0][-1]) if rows else 0
    return Claimed([row for row in rows if row[0] is not None], blocked)


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
    with _batch_cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
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
    with transaction.atomic(using=alias), _cursor(alias) as cursor:
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


# --- operator transitions ----------------------------------------------------------------


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
    with _cursor(alias) as cursor:
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
    with transaction.atomic(using=alias), _cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
        cursor.execute(_DELETE, [list(job_ids)])
        return sorted(Deleted(int(r[0]), r[1], r[2]) for r in cursor.fetchall())


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
    with _cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
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
    with transaction.atomic(using=alias), _cursor(alias) as cursor:
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
    with _cursor(alias) as cursor:
        cursor.execute(_UNBLOCK_RESUMED)
        rows = cursor.fetchall()
        notify_queues(cursor, [row[0] for row in rows])
    return sum(int(row[1]) for row in rows)
