-- The statements of admin/workflow.py, each under its name (loaded once, at import).

-- name: steps
SELECT name, kind, started_at, finished_at, wake_at, attempt, left(result::text, %s),
       length(result::text)
FROM pqjobs_step WHERE job_id = %s ORDER BY id LIMIT %s
