-- The statements of transitions/attempts.py, each under its name (loaded once, at import).

-- name: end_attempt
WITH ended AS (
    UPDATE pqjobs_job
    SET status = CASE
            WHEN %(then)s = 'auto' AND attempts < max_attempts THEN 'ready'
            WHEN %(then)s = 'auto' THEN 'failed'
            ELSE %(then)s END,
        run_after = CASE
            WHEN %(then)s = 'auto' AND attempts < max_attempts
            THEN now() + make_interval(secs => %(delay)s) ELSE run_after END,
        finished_at = CASE
            WHEN %(then)s = 'auto' AND attempts < max_attempts THEN NULL ELSE now() END,
        last_error = %(error)s, error_type = %(error_type)s, duration_ms = %(duration_ms)s,
        heartbeat_at = NULL, updated_at = now()
    WHERE shelf = 'hot' AND id = %(id)s AND status = 'running' AND locked_by = %(worker)s
      AND attempts = %(attempt)s
    RETURNING id, status, locked_at
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, %(attempt)s, %(worker)s, locked_at, now(), %(failure)s, %(error_type)s, %(error)s
    FROM ended
)
SELECT status FROM ended

-- name: release
WITH released AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', attempts = j.attempts - 1,
        run_after = now() + make_interval(secs => %(delay)s), heartbeat_at = NULL,
        updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(attempts)s::int[]) AS t(id, attempt)
    WHERE j.shelf = 'hot' AND j.id = t.id AND j.status = 'running' AND j.locked_by = %(worker)s
      AND j.attempts = t.attempt
      -- given back for this reason fewer than %(limit)s times in a row: the attempt number
      -- is used again, so its history rows of this reason are that streak
      AND (%(limit)s::integer IS NULL OR (
          SELECT count(*) FROM pqjobs_attempt a
          WHERE a.shelf = 'hot' AND a.job_id = j.id AND a.attempt = t.attempt AND a.error_type = %(error_type)s
      ) < %(limit)s::integer)
    RETURNING j.id, t.attempt, j.locked_at
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, attempt, %(worker)s, locked_at, now(), %(failure)s, %(error_type)s, %(error)s
    FROM released
)
SELECT id FROM released

-- name: mark_started
UPDATE pqjobs_job AS j
SET started_at = now()
FROM unnest(%s::bigint[], %s::int[]) AS t(id, attempt)
WHERE j.shelf = 'hot' AND j.id = t.id AND j.status = 'running' AND j.locked_by = %s AND j.attempts = t.attempt

-- name: rescue
WITH stale AS (
    SELECT j.id, j.attempts AS attempt,
           -- the attempt counts if its handler started, or once attempts of this job
           -- have been given back %(give_back)s times (a handler that kills its worker
           -- before its start is recorded must not run for ever)
           (j.started_at IS NOT NULL AND j.started_at >= j.locked_at)
           OR (SELECT count(*) FROM pqjobs_attempt a
               WHERE a.shelf = 'hot' AND a.job_id = j.id AND a.error_type = 'WorkerLostBeforeStart')
              >= %(give_back)s AS charged
    FROM pqjobs_job j
    WHERE j.shelf = 'hot' AND j.status = 'running'
      -- given a worker id (an operator says it is gone): every running job of that worker
      AND CASE WHEN %(worker)s::text IS NOT NULL THEN j.locked_by = %(worker)s
          ELSE j.heartbeat_at IS NULL
               OR j.heartbeat_at < now() - make_interval(secs => %(stale)s)
               OR (j.timeout_seconds IS NOT NULL
                   AND j.locked_at < now() - make_interval(secs => j.timeout_seconds + %(stale)s))
          END
    ORDER BY j.id
    FOR UPDATE OF j SKIP LOCKED
), rescued AS (
    UPDATE pqjobs_job AS j
    SET status = CASE
            WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled'
            WHEN stale.charged AND j.attempts >= j.max_attempts THEN 'failed'
            ELSE 'ready' END,
        -- an attempt is given back by allowing one more, never by reusing its number:
        -- attempt numbers fence off the verdicts of a worker that may still be alive
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
    WHERE j.shelf = 'hot' AND j.id = stale.id
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

-- name: complete
-- pqjobs_complete() (sql/schema/claim.sql): planned once per server session. The attempts travel
-- as one JSON document (text the worker writes), not as five arrays: psycopg built arrays
-- element by element in Python, which cost more than the statement.
SELECT pqjobs_complete(%s, %s::jsonb)

-- name: save_progress
UPDATE pqjobs_job SET progress = %s::jsonb, updated_at = now()
WHERE shelf = 'hot' AND id = %s AND status = 'running' AND locked_by = %s AND attempts = %s

-- name: forget_stale_workers
DELETE FROM pqjobs_worker
WHERE heartbeat_at < now() - make_interval(secs => %s) OR worker_id = %s

-- name: take_rescuer_lock
-- one rescuer at a time across all workers, until the rescue's transaction ends
SELECT pg_try_advisory_xact_lock(%s)

-- name: claims_of_worker
-- The attempts the database says a worker claimed since a time (its first claim: an earlier
-- process of the same worker id claimed the ones before) and is running. Its reconcile
-- compares them with the attempts it holds. The claim's time tells two claims of one
-- attempt number apart (a release reuses the number).
SELECT id, attempts, locked_at FROM pqjobs_job
WHERE shelf = 'hot' AND status = 'running' AND locked_by = %s AND locked_at >= to_timestamp(%s)
ORDER BY id

-- name: give_back
-- Attempts given back while they run: by their worker, which is not running them (their end
-- was lost: a failover to a standby that had not received it, or a row changed behind its
-- back; fenced on the claim itself, attempt number and claim time, so an attempt claimed
-- again since is left alone), or on an operator's word (fenced on the attempt number, the
-- claim time NULL). Uncharged by allowing one more attempt, never by reusing its number: the
-- worker that held it may still be alive, and its outcome must stay fenced off. A cancel
-- requested meanwhile is honoured, as a rescue does. The attempt is recorded (outcome
-- 'released'); %(on_job)s: the note is the job's last error too.
WITH released AS (
    UPDATE pqjobs_job AS j
    SET status = CASE WHEN j.cancel_requested_at IS NOT NULL THEN 'cancelled' ELSE 'ready' END,
        max_attempts = LEAST(j.max_attempts::bigint + 1, 2147483647),
        run_after = now(),
        finished_at = CASE WHEN j.cancel_requested_at IS NOT NULL THEN now() END,
        last_error = CASE WHEN %(on_job)s THEN %(note)s ELSE j.last_error END,
        error_type = CASE WHEN %(on_job)s THEN %(error_type)s ELSE j.error_type END,
        heartbeat_at = NULL, updated_at = now()
    FROM unnest(%(ids)s::bigint[], %(attempts)s::int[], %(claimed)s::timestamptz[])
        AS t(id, attempt, locked_at)
    WHERE j.shelf = 'hot' AND j.id = t.id AND j.status = 'running' AND j.locked_by = %(worker)s
      AND j.attempts = t.attempt AND (t.locked_at IS NULL OR j.locked_at = t.locked_at)
    RETURNING j.id, j.job_type, j.queue, j.status, t.attempt, j.locked_at
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, attempt, %(worker)s, locked_at, now(), 'released', %(error_type)s, %(note)s
    FROM released
)
SELECT id, job_type, queue, status, attempt FROM released ORDER BY id
