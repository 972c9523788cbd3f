-- The statements of transitions/deadlines.py, each under its name (loaded once, at import).

-- name: expire
-- waiting / ready / blocked → expired for jobs whose deadline passed (the partial index
-- pqjobs_job_expiring holds just these rows), the earliest first, at most %(batch)s; a job
-- another transaction holds (a claim deciding on it, an operator) is left for the next pass.
-- The claim never starts a job past its deadline, so one this misses for a moment waits.
WITH due AS (
    SELECT id FROM pqjobs_job
    WHERE shelf = 'hot' AND expires_at IS NOT NULL AND status IN ('waiting', 'ready', 'blocked')
      AND expires_at <= now()
    ORDER BY expires_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pqjobs_job AS j
SET status = 'expired', finished_at = now(), updated_at = now(), error_type = 'Expired',
    last_error = 'not started by its deadline, '
                 || to_char(j.expires_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'
FROM due
WHERE j.shelf = 'hot' AND j.id = due.id
RETURNING j.id
