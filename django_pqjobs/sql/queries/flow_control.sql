-- The statements of flow.py, each under its name (loaded once, at import).

-- name: has_jobs
-- all shelves: whether a type has any job at all
SELECT EXISTS (SELECT 1 FROM pqjobs_job WHERE job_type = %s)

-- name: paused
SELECT kind, name, paused_at, paused_by FROM pqjobs_pause ORDER BY kind, name

-- name: held
SELECT blocked_by, COALESCE(CASE blocked_by WHEN 'limit' THEN concurrency_key
                                            WHEN 'rate' THEN rate_key END, queue), count(*)
FROM pqjobs_job WHERE shelf = 'hot' AND status = 'blocked'
GROUP BY 1, 2 ORDER BY 3 DESC, 1, 2 LIMIT %s
