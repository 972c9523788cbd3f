-- The statements of transitions/workflows.py, each under its name (loaded once, at import).

-- name: park
-- running → waiting, the attempt given back uncharged (as a release gives it back): the
-- handler parked it durably (a sleep, a wait for a signal), to be woken at %(delay)s
-- seconds from now or by its signal. A wait whose signal %(signal)s came meanwhile is not
-- parked: ready, due now. Fenced on the attempt; its history records the park.
WITH parked AS (
    UPDATE pqjobs_job AS j
    SET status = CASE WHEN s.arrived THEN 'ready' ELSE 'waiting' END,
        attempts = j.attempts - 1,
        run_after = now() + make_interval(secs => CASE WHEN s.arrived THEN 0 ELSE %(delay)s END),
        heartbeat_at = NULL, updated_at = now()
    FROM (
        SELECT %(signal)s::text IS NOT NULL AND EXISTS (
            SELECT 1 FROM pqjobs_signal g WHERE g.job_id = %(id)s AND g.name = %(signal)s
        ) AS arrived
    ) s
    WHERE j.shelf = 'hot' AND j.id = %(id)s AND j.status = 'running' AND j.locked_by = %(worker)s
      AND j.attempts = %(attempt)s AND j.waiting_for = 0
    RETURNING j.id, j.locked_at, j.status
), recorded AS (
    INSERT INTO pqjobs_attempt
        (job_id, attempt, worker_id, started_at, finished_at, outcome, error_type, traceback)
    SELECT id, %(attempt)s, %(worker)s, locked_at, now(), 'parked', 'Parked',
           CASE WHEN status = 'ready' THEN %(note)s || ' (its signal had come: due now)'
                ELSE %(note)s END
    FROM parked
)
SELECT status FROM parked

-- name: wake_due
-- waiting → ready for parked jobs whose time came (the partial index pqjobs_job_parked
-- holds just the parked ones), the earliest first, at most %(batch)s; a job another
-- transaction holds (its signal's sender, an operator) is left for the next pass.
WITH due AS (
    SELECT id FROM pqjobs_job
    WHERE shelf = 'hot' AND status = 'waiting' AND waiting_for = 0 AND run_after <= now()
    ORDER BY run_after
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pqjobs_job AS j
SET status = 'ready', updated_at = now()
FROM due
WHERE j.shelf = 'hot' AND j.id = due.id
RETURNING j.id, j.queue

-- name: wake_for_signal
-- waiting → ready, due now, for a job parked waiting for the signal %(name)s (an open wait
-- of that name); any other job is left as it is.
UPDATE pqjobs_job AS j
SET status = 'ready', run_after = now(), updated_at = now()
WHERE j.shelf = 'hot' AND j.id = %(id)s AND j.status = 'waiting' AND j.waiting_for = 0
  AND EXISTS (
      SELECT 1 FROM pqjobs_step s
      WHERE s.job_id = j.id AND s.name = %(name)s AND s.kind = 'signal'
        AND s.finished_at IS NULL
  )
RETURNING j.queue

-- name: end_wait
-- An operator ends a parked job's wait: its open sleep or wait is over (a wait for a signal
-- then times out in the handler), and the job is ready, due now.
WITH job AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', run_after = now(), updated_at = now()
    WHERE j.shelf = 'hot' AND j.id = %(id)s AND j.status = 'waiting' AND j.waiting_for = 0
    RETURNING j.id, j.queue
), ended AS (
    UPDATE pqjobs_step AS s SET wake_at = now()
    FROM job
    WHERE s.job_id = job.id AND s.finished_at IS NULL
    RETURNING s.name, s.kind
)
SELECT job.queue, ended.name, ended.kind FROM job LEFT JOIN ended ON true

-- name: wake_for_children
-- all shelves (c): the awaited child, finished and maybe shelved
-- waiting → ready, due now, for parked jobs whose awaited child job finished (the partial
-- index pqjobs_step_open_child holds the open waits for a child), at most %(batch)s; a job
-- another transaction holds is left for the next pass.
WITH due AS (
    SELECT j.id FROM pqjobs_step s
    JOIN pqjobs_job c ON c.id = (s.result ->> 'job_id')::bigint
    JOIN pqjobs_job j ON j.id = s.job_id
    WHERE s.kind = 'child' AND s.finished_at IS NULL
      AND c.status IN ('done', 'failed', 'cancelled', 'expired')
      AND j.shelf = 'hot' AND j.status = 'waiting' AND j.waiting_for = 0
    LIMIT %(batch)s
    FOR UPDATE OF j SKIP LOCKED
)
UPDATE pqjobs_job AS j
SET status = 'ready', run_after = now(), updated_at = now()
FROM due
WHERE j.shelf = 'hot' AND j.id = due.id
RETURNING j.id, j.queue
