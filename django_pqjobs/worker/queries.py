"""The job state machine: every statement that moves a job between statuses.

    ready ──claim──► running ──complete──► done
      ▲                 │ ──retry (attempts left)──► ready (run_after = now + backoff)
      │                 │ ──retry (no attempts left) / fail──► failed
      │                 │ ──finish_cancelled──► cancelled
      ├──release────────┤   (shutdown: the attempt is given back)
      └──rescue─────────┘   (worker stopped heartbeating: ready, or failed if none left)
    ready ──cancel──► cancelled;  failed/cancelled ──requeue──► ready

Transitions out of ``running`` are fenced on ``(id, locked_by, attempts)``: a worker that
lost its job (rescued and claimed again elsewhere) cannot overwrite the newer outcome.
The database clock (``now()``) is the only clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connections, transaction
from django.db.models.base import ModelState
from django.utils import timezone
from psycopg import ClientCursor

from ..clock import database_now  # noqa: F401 - re-exported for callers of queries
from ..conf import conf
from ..enqueue import NOTIFY_CHANNEL
from ..models import Job

ERROR_TEXT_LIMIT = 10 * 1024
REAPER_LOCK_KEY = 0x70716A6F6273  # "pqjobs": one reaper at a time across all workers


def cap_error(text: str, limit: int = ERROR_TEXT_LIMIT) -> str:
    """Keep at most ``limit`` characters, preferring the end (where the exception is)."""
    if len(text) <= limit:
        return text
    marker = f"[... {len(text) - limit} characters cut ...]\n"
    return marker + text[-(limit - len(marker)) :]


def _cursor(alias: str) -> Any:
    return connections[alias].cursor()


# --- claim ----------------------------------------------------------------------------------

_CLAIM = """
WITH picked AS (
    SELECT id FROM pqjobs_job
    WHERE status = 'ready' AND run_after <= now() {queue_filter}
    ORDER BY priority DESC, run_after, id
    LIMIT %s
    FOR UPDATE SKIP LOCKED
), claimed AS (
    UPDATE pqjobs_job AS j
    SET status = 'running', attempts = j.attempts + 1, locked_at = now(), locked_by = %s,
        heartbeat_at = now(), updated_at = now()
    FROM picked
    WHERE j.id = picked.id
    RETURNING j.*
)
SELECT id, job_type, queue, payload::text, priority, attempts, max_attempts, timeout_seconds,
       dedupe_key, parent_id, schedule_id, last_error, error_type, result::text,
       duration_ms, progress::text, {epochs}
FROM claimed
ORDER BY priority DESC, run_after, id
"""
# Settings for the claim's transaction only.
# - The claim must walk pqjobs_job_claim in order and stop after LIMIT rows. Planner
#   statistics of a queue table are often stale (taken when it held few ready jobs); the
#   planner then reads every ready row with a bitmap scan and sorts them, which costs
#   milliseconds per claim with 20,000 ready jobs and seconds with millions. Rule out the
#   plans that read everything.
# - The claim's commit does not wait for its WAL flush: if the database server crashes in
#   the next fraction of a second, the claim is undone and the job runs again, which
#   at-least-once delivery allows; the job itself was committed durably when enqueued.
CLAIM_PLAN = (
    "SELECT set_config('enable_bitmapscan', 'off', true), "
    "set_config('enable_seqscan', 'off', true), "
    "set_config('synchronous_commit', 'off', true)"
)
# Timestamps travel as epoch seconds: Django's timestamptz loader is pure Python and cost
# more per claimed job than everything else in the claim. A float8 holds today's epoch to
# a quarter of a microsecond, so the datetimes are exact.
_TIMESTAMPS = ("run_after", "locked_at", "created_at", "finished_at", "cancel_requested_at")
_CLAIM_SQL = _CLAIM.replace(
    "{epochs}", ", ".join(f"extract(epoch FROM {name})::float8" for name in _TIMESTAMPS)
)


def claim_sql(filter_queues: bool) -> str:
    """The claim statement; parameters: [queues,] limit, worker id. Run after CLAIM_PLAN."""
    return _CLAIM_SQL.replace("{queue_filter}", "AND queue = ANY(%s)" if filter_queues else "")


# What claim() sends, built once: the plan settings and the claim in one message.
_CLAIM_MESSAGE = {queues: f"{CLAIM_PLAN};\n{claim_sql(queues)}" for queues in (False, True)}


def _aware(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def _naive(epoch: float | None) -> datetime | None:
    """What Django returns with ``USE_TZ = False``: naive, in the default time zone."""
    return None if epoch is None else timezone.make_naive(datetime.fromtimestamp(epoch, UTC))


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _claimed_job(
    row: tuple[Any, ...],
    worker_id: str,
    alias: str,
    to_datetime: Callable[[float | None], datetime | None],
) -> Job:
    """A Job built straight from a claim row, without ``Model.__init__``.

    Django's own unpickling builds instances this way; ``__init__`` (defaults, descriptors,
    signals) took longer than running a no-op job. Every concrete field is set, so nothing
    is deferred and reading a field never queries.
    """
    locked_at = to_datetime(row[17])
    state = ModelState()
    state.adding = False
    state.db = alias
    job = Job.__new__(Job)
    job.__dict__.update(
        _state=state,
        id=row[0],
        job_type=row[1],
        queue=row[2],
        payload=json.loads(row[3]),
        status="running",
        priority=row[4],
        attempts=row[5],
        max_attempts=row[6],
        timeout_seconds=row[7],
        dedupe_key=row[8],
        parent_id=row[9],
        schedule_id=row[10],
        last_error=row[11],
        error_type=row[12],
        result=_json(row[13]),
        duration_ms=row[14],
        progress=_json(row[15]),
        run_after=to_datetime(row[16]),
        locked_at=locked_at,
        locked_by=worker_id,
        heartbeat_at=locked_at,
        updated_at=locked_at,
        created_at=to_datetime(row[18]),
        finished_at=to_datetime(row[19]),
        cancel_requested_at=to_datetime(row[20]),
    )
    return job


def claim(alias: str, worker_id: str, queues: Sequence[str] | None, limit: int) -> list[Job]:
    """Claim up to ``limit`` due jobs for ``worker_id`` in one statement; highest first."""
    if limit < 1:
        return []
    params: list[Any] = [list(queues)] if queues else []
    params += [limit, worker_id]
    connection = connections[alias]
    connection.ensure_connection()
    with connection.wrap_database_errors, ClientCursor(connection.connection) as cursor:
        # One simple-protocol message: its statements run as one transaction, so the plan
        # settings hold for the claim and the whole claim costs a single round trip.
        cursor.execute(_CLAIM_MESSAGE[bool(queues)], params)
        cursor.nextset()
        rows = cursor.fetchall()
    to_datetime = _aware if settings.USE_TZ else _naive
    return [_claimed_job(row, worker_id, alias, to_datetime) for row in rows]


# --- outcomes of a running attempt (all fenced) ---------------------------------------------

_FENCE = "id = %s AND status = 'running' AND locked_by = %s AND attempts = %s"

_COMPLETE = """
UPDATE pqjobs_job AS j
SET status = 'done', result = t.result::jsonb, finished_at = now(), duration_ms = t.ms,
    heartbeat_at = NULL, updated_at = now(), progress = COALESCE(t.progress::jsonb, j.progress)
FROM unnest(%s::bigint[], %s::int[], %s::text[], %s::bigint[], %s::text[])
     AS t(id, attempt, result, ms, progress)
WHERE j.id = t.id AND j.status = 'running' AND j.locked_by = %s AND j.attempts = t.attempt
RETURNING j.id
"""


@dataclass(frozen=True)
class Claimed:
    """Identifies one claimed attempt: the fence for every transition out of ``running``."""

    job_id: int
    worker_id: str
    attempt: int

    @classmethod
    def of(cls, job: Job) -> Claimed:
        assert job.locked_by is not None
        return cls(job.id, job.locked_by, job.attempts)

    def params(self) -> list[Any]:
        return [self.job_id, self.worker_id, self.attempt]


@dataclass(frozen=True)
class Completion:
    """A successful attempt waiting to be recorded."""

    claimed: Claimed
    result_json: str | None
    duration_ms: int
    progress: dict[str, Any] | None = None


def complete_many(alias: str, completions: Sequence[Completion]) -> set[int]:
    """running → done for many attempts of one worker in one statement.

    Returns the ids recorded; an attempt missing from it was no longer ours (fenced off).
    """
    if not completions:
        return set()
    worker_ids = {c.claimed.worker_id for c in completions}
    if len(worker_ids) != 1:
        raise ValueError(f"complete_many takes one worker's attempts, got {sorted(worker_ids)}")
    with _cursor(alias) as cursor:
        cursor.execute(
            _COMPLETE,
            [
                [c.claimed.job_id for c in completions],
                [c.claimed.attempt for c in completions],
                [c.result_json for c in completions],
                [c.duration_ms for c in completions],
                [json.dumps(c.progress) if c.progress else None for c in completions],
                worker_ids.pop(),
            ],
        )
        return {int(row[0]) for row in cursor.fetchall()}


def complete(
    alias: str,
    claimed: Claimed,
    result_json: str | None,
    duration_ms: int,
    progress: dict[str, Any] | None = None,
) -> bool:
    """running → done. False if the attempt was no longer ours (fenced off)."""
    done = complete_many(alias, [Completion(claimed, result_json, duration_ms, progress)])
    return claimed.job_id in done


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
    claimed: Claimed,
    *,
    outcome: str,
    error_type: str,
    error: str,
    duration_ms: int | None,
    delay: float = 0.0,
    final: str = "auto",
) -> str | None:
    """End a failed attempt and record it in the attempt history.

    ``final="auto"``: back to ``ready`` after ``delay`` seconds while attempts remain, else
    ``failed`` (the dead-letter state). ``final="failed"`` / ``"cancelled"`` forces that
    status. Returns the job's new status, or None if the attempt was fenced off.
    """
    if final not in ("auto", "failed", "cancelled"):
        raise ValueError(f"final must be 'auto', 'failed' or 'cancelled', got {final!r}")
    with _cursor(alias) as cursor:
        cursor.execute(
            _END_ATTEMPT,
            {
                "final": final,
                "delay": float(delay),
                "error": cap_error(error),
                "error_type": error_type[:200],
                "duration_ms": duration_ms,
                "id": claimed.job_id,
                "worker": claimed.worker_id,
                "attempt": claimed.attempt,
                "outcome": outcome,
            },
        )
        row = cursor.fetchone()
    return None if row is None else str(row[0])


_RELEASE = """
WITH released AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', attempts = j.attempts - 1, run_after = now(), heartbeat_at = NULL,
        updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS t(id, attempt)
    WHERE j.id = t.id AND j.status = 'running' AND j.locked_by = %(worker)s
      AND j.attempts = t.attempt
    RETURNING j.id, t.attempt, j.locked_at
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, attempt, %(worker)s, locked_at, now(), 'released', 'WorkerShutdown',
           'the worker shut down before the job finished; the attempt was given back'
    FROM released
)
SELECT id FROM released
"""


def release(alias: str, claims: Sequence[Claimed]) -> list[int]:
    """running → ready at once, giving the attempt back (graceful shutdown)."""
    if not claims:
        return []
    worker = claims[0].worker_id
    with _cursor(alias) as cursor:
        cursor.execute(
            _RELEASE,
            {
                "ids": [c.job_id for c in claims],
                "attempts": [c.attempt for c in claims],
                "worker": worker,
            },
        )
        return [int(r[0]) for r in cursor.fetchall()]


def save_progress(
    alias: str, job_id: int, worker_id: str, attempt: int, progress: dict[str, Any]
) -> bool:
    with _cursor(alias) as cursor:
        cursor.execute(
            f"UPDATE pqjobs_job SET progress = %s::jsonb, updated_at = now() WHERE {_FENCE}",
            [json.dumps(progress), job_id, worker_id, attempt],
        )
        return bool(cursor.rowcount == 1)


# --- heartbeats and rescue ------------------------------------------------------------------

_HEARTBEAT = """
UPDATE pqjobs_job AS j
SET heartbeat_at = now()
FROM unnest(%s::bigint[], %s::int[]) AS t(id, attempt)
WHERE j.id = t.id AND j.status = 'running' AND j.locked_by = %s AND j.attempts = t.attempt
RETURNING j.id, j.cancel_requested_at IS NOT NULL
"""

_WORKER_UPSERT = """
INSERT INTO pqjobs_worker (worker_id, hostname, pid, queues, concurrency, started_at,
                           heartbeat_at)
VALUES (%s, %s, %s, %s::jsonb, %s, now(), now())
ON CONFLICT (worker_id) DO UPDATE
SET heartbeat_at = now(), hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
    queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency
"""


@dataclass(frozen=True)
class HeartbeatResult:
    alive: set[int]
    cancel_requested: set[int]


def heartbeat(
    alias: str,
    worker_id: str,
    claims: Sequence[Claimed],
    *,
    hostname: str,
    pid: int,
    queues: Sequence[str] | None,
    concurrency: int,
) -> HeartbeatResult:
    """Record that the worker and its running attempts are alive.

    Returns which of ``claims`` are still ours and which have a cancel request.
    """
    with _cursor(alias) as cursor:
        cursor.execute(
            _WORKER_UPSERT,
            [worker_id, hostname, pid, json.dumps(list(queues) if queues else None), concurrency],
        )
        if not claims:
            return HeartbeatResult(set(), set())
        cursor.execute(
            _HEARTBEAT,
            [[c.job_id for c in claims], [c.attempt for c in claims], worker_id],
        )
        rows = cursor.fetchall()
    return HeartbeatResult({int(r[0]) for r in rows}, {int(r[0]) for r in rows if r[1]})


def unregister_worker(alias: str, worker_id: str) -> None:
    with _cursor(alias) as cursor:
        cursor.execute("DELETE FROM pqjobs_worker WHERE worker_id = %s", [worker_id])


_RESCUE = """
WITH stale AS (
    SELECT id FROM pqjobs_job
    WHERE status = 'running'
      AND (heartbeat_at IS NULL OR heartbeat_at < now() - make_interval(secs => %(stale)s)
           OR (timeout_seconds IS NOT NULL
               AND locked_at < now() - make_interval(secs => timeout_seconds + %(stale)s)))
    ORDER BY id
    FOR UPDATE SKIP LOCKED
), rescued AS (
    UPDATE pqjobs_job AS j
    SET status = CASE
            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN j.attempts >= j.max_attempts THEN 'failed'
            ELSE 'ready' END,
        run_after = now(),
        finished_at = CASE
            WHEN j.cancel_requested_at IS NOT NULL OR j.attempts >= j.max_attempts
            THEN now() END,
        last_error = 'worker ' || COALESCE(j.locked_by, '?')
                     || ' stopped heartbeating while running attempt ' || j.attempts
                     || ' (last heartbeat ' || COALESCE(j.heartbeat_at::text, 'never') || ')',
        error_type = 'WorkerLost', heartbeat_at = NULL, updated_at = now()
    FROM stale
    WHERE j.id = stale.id
    RETURNING j.id, j.job_type, j.status, j.attempts, j.locked_by, j.locked_at, j.last_error
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, attempts, COALESCE(locked_by, ''), locked_at, now(), 'lost', 'WorkerLost',
           last_error
    FROM rescued
)
SELECT id, job_type, status, attempts, locked_by FROM rescued ORDER BY id
"""


@dataclass(frozen=True)
class Rescued:
    job_id: int
    job_type: str
    status: str
    attempt: int
    worker_id: str | None


def rescue_stale(alias: str, stale_after: float) -> list[Rescued] | None:
    """Give back running jobs whose worker stopped heartbeating ``stale_after`` seconds ago.

    They go to ``ready`` (or ``failed`` when no attempts are left, ``cancelled`` when a
    cancel was requested). Only one rescuer runs at a time across all workers: returns None
    when another holds the lock.
    """
    with transaction.atomic(using=alias), _cursor(alias) as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [REAPER_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(_RESCUE, {"stale": float(stale_after)})
        rows = cursor.fetchall()
        cursor.execute(
            "DELETE FROM pqjobs_worker WHERE heartbeat_at < now() - make_interval(secs => %s)",
            [float(stale_after)],
        )
    return [Rescued(int(r[0]), r[1], r[2], int(r[3]), r[4]) for r in rows]


# --- operator transitions -------------------------------------------------------------------


@dataclass(frozen=True)
class Cancelled:
    cancelled: list[int]  # were ready: now cancelled
    cancel_requested: list[int]  # were running: their handler / child is asked to stop


def cancel_many(alias: str, job_ids: Sequence[int]) -> Cancelled:
    """ready → cancelled; running → cancel requested. Finished jobs are left alone.

    Each UPDATE re-checks the status under the row lock, so a job claimed by a worker in
    the meantime gets a cancel request instead of losing its running attempt.
    """
    ids = list(job_ids)
    with _cursor(alias) as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET status = 'cancelled', finished_at = now(), updated_at = now() "
            "WHERE id = ANY(%s) AND status = 'ready' RETURNING id",
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


def requeue_many(alias: str, job_ids: Sequence[int]) -> list[int]:
    """failed/cancelled → ready now, attempts reset; the attempt history is kept."""
    with _cursor(alias) as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET status = 'ready', attempts = 0, run_after = now(), "
            "finished_at = NULL, cancel_requested_at = NULL, locked_by = NULL, "
            "locked_at = NULL, heartbeat_at = NULL, updated_at = now() "
            "WHERE id = ANY(%s) AND status IN ('failed', 'cancelled') RETURNING id",
            [list(job_ids)],
        )
        ids = sorted(int(r[0]) for r in cursor.fetchall())
        _wake(cursor, ids)
        return ids


def requeue(alias: str, job_id: int) -> bool:
    return bool(requeue_many(alias, [job_id]))


def run_now_many(alias: str, job_ids: Sequence[int]) -> list[int]:
    """A delayed ready job becomes due now (``run_after = now()``)."""
    with _cursor(alias) as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET run_after = now(), updated_at = now() "
            "WHERE id = ANY(%s) AND status = 'ready' AND run_after > now() RETURNING id",
            [list(job_ids)],
        )
        ids = sorted(int(r[0]) for r in cursor.fetchall())
        _wake(cursor, ids)
        return ids


def _wake(cursor: Any, job_ids: list[int]) -> None:
    """NOTIFY the queues of jobs that just became due, so idle workers claim them now."""
    if job_ids and conf.LISTEN_NOTIFY:
        cursor.execute(
            "SELECT pg_notify(%s, queue) FROM (SELECT DISTINCT queue FROM pqjobs_job "
            "WHERE id = ANY(%s)) q",
            [NOTIFY_CHANNEL, job_ids],
        )


# --- retention ------------------------------------------------------------------------------

_PRUNE = """
WITH doomed AS (
    SELECT id FROM pqjobs_job
    WHERE status = %(status)s AND finished_at < now() - make_interval(secs => %(age)s)
    ORDER BY finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
), history AS (
    DELETE FROM pqjobs_attempt WHERE job_id IN (SELECT id FROM doomed)
)
DELETE FROM pqjobs_job WHERE id IN (SELECT id FROM doomed)
"""


def prune(
    alias: str, retention: dict[str, float | None], batch: int = 5000, max_batches: int = 1000
) -> dict[str, int]:
    """Delete finished jobs older than their status's retention, in short batches."""
    deleted: dict[str, int] = {}
    for status in ("done", "failed", "cancelled"):
        age = retention.get(status)
        deleted[status] = 0
        if age is None:
            continue
        for _ in range(max_batches):
            with _cursor(alias) as cursor:
                cursor.execute(_PRUNE, {"status": status, "age": float(age), "batch": batch})
                count = cursor.rowcount
            deleted[status] += count
            if count < batch:
                break
    return deleted


# --- vacuum where autovacuum does not run ---------------------------------------------------

VACUUM_LOCK_KEY = REAPER_LOCK_KEY + 1  # one vacuuming worker at a time
VACUUM_MIN_DEAD = 10_000
VACUUM_DEAD_RATIO = 0.1

_JOB_TABLE_HEALTH = """
SELECT s.n_dead_tup, s.n_live_tup,
       current_setting('autovacuum')::boolean
       AND NOT coalesce('autovacuum_enabled=false' = ANY(c.reloptions), false)
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relid = 'pqjobs_job'::regclass
"""


def vacuum_if_needed(alias: str) -> bool:
    """VACUUM the job tables when autovacuum is off for them and dead rows piled up.

    Every job leaves dead row versions behind (claim, completion, pruning); without
    autovacuum nothing reclaims them and the table and its indexes grow for ever. Returns
    True if it vacuumed. Must run outside a transaction (VACUUM cannot run inside one).
    """
    with _cursor(alias) as cursor:
        cursor.execute(_JOB_TABLE_HEALTH)
        row = cursor.fetchone()
        if row is None:
            return False
        dead, live, autovacuum = int(row[0]), int(row[1]), bool(row[2])
        if autovacuum or dead < max(VACUUM_MIN_DEAD, VACUUM_DEAD_RATIO * live):
            return False
        cursor.execute("SELECT pg_try_advisory_lock(%s)", [VACUUM_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return False
        try:
            cursor.execute("VACUUM (ANALYZE) pqjobs_job, pqjobs_attempt")
        finally:
            cursor.execute("SELECT pg_advisory_unlock(%s)", [VACUUM_LOCK_KEY])
    return True
