-- The statements of waiting.py, each under its name (loaded once, at import).

-- name: mark
UPDATE pqjobs_job SET waited_on = true
WHERE shelf = 'hot'
  AND id = (SELECT id FROM pqjobs_job WHERE shelf = 'hot' AND id = %s AND NOT waited_on
            AND status NOT IN ('done', 'failed', 'cancelled', 'expired')
            FOR NO KEY UPDATE SKIP LOCKED)

-- name: read
-- all shelves: looked for on the hot shelf first, then on every shelf
SELECT status, result::text, error_type, last_error, waited_on, job_type FROM pqjobs_job
WHERE {shelf} id = %s
LIMIT 1
