-- The statements of admin/composition.py, each under its name (loaded once, at import).

-- name: count_edges
SELECT count(*) FROM (SELECT 1 FROM pqjobs_dependency WHERE {column} = %s LIMIT %s) t

-- name: members_by_status
-- all shelves: a batch's members, finished ones in history too
SELECT status, count(*) FROM pqjobs_job WHERE batch_id = %s GROUP BY status

-- name: callback_jobs
-- all shelves: a batch's callbacks, finished ones in history too
SELECT id, status, job_type FROM pqjobs_job WHERE callback_of_id = %s ORDER BY id DESC LIMIT %s

-- name: count_callback_jobs
-- all shelves: a batch's callbacks, finished ones in history too
SELECT count(*) FROM (SELECT 1 FROM pqjobs_job WHERE callback_of_id = %s LIMIT %s) t
