-- The statements of context.py, each under its name (loaded once, at import).

-- name: dependency_results
-- all shelves: the results of prerequisites, shelved ones too
SELECT j.id, j.result::text, j.job_type FROM pqjobs_dependency d JOIN pqjobs_job j ON j.id = d.depends_on_id WHERE d.job_id = %s ORDER BY j.id
