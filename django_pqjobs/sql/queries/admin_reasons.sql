-- The statements of admin/reasons.py, each under its name (loaded once, at import).

-- name: holder
-- {held_by_key} stands for the predicate of the unique index of dedupe keys (sql.held_by_key).
SELECT id, status FROM pqjobs_job
WHERE shelf = 'hot' AND job_type = %s AND dedupe_key = %s AND {held_by_key}
ORDER BY id DESC LIMIT 1
