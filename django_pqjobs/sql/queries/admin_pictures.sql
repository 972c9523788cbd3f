-- The statements of admin/pictures.py, each under its name (loaded once, at import).

-- name: step_rows
SELECT name, kind, started_at, finished_at, wake_at FROM pqjobs_step
WHERE job_id = %s ORDER BY id LIMIT %s

-- name: members
-- all shelves: a batch's members, finished ones in history too
SELECT j.id, j.status, j.job_type,
       ARRAY(SELECT d.depends_on_id FROM pqjobs_dependency d WHERE d.job_id = j.id
             ORDER BY d.depends_on_id LIMIT 8)
FROM pqjobs_job j WHERE j.batch_id = %s ORDER BY j.id LIMIT %s

-- name: child_steps
SELECT name, CASE WHEN result ->> 'job_id' ~ '^[0-9]{1,18}$' THEN (result ->> 'job_id')::bigint END
FROM pqjobs_step WHERE job_id = %s AND kind = 'child' ORDER BY id LIMIT %s
