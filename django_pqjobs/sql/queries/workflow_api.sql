-- The statements of workflows.py, each under its name (loaded once, at import).

-- name: records
SELECT name, kind, result::text, finished_at IS NOT NULL,
       extract(epoch FROM wake_at - now())::float8
FROM pqjobs_step WHERE job_id = %s

-- name: record
SELECT pqjobs_record_step(%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)

-- name: finish
UPDATE pqjobs_step SET finished_at = now(), result = %(result)s::jsonb
WHERE {commit} AND job_id = %(job)s AND name = %(name)s AND finished_at IS NULL
  AND EXISTS (
      SELECT 1 FROM pqjobs_job
      WHERE shelf = 'hot' AND id = %(job)s AND status = 'running' AND locked_by = %(worker)s
        AND attempts = %(attempt)s
  )
RETURNING id

-- name: signal
SELECT payload::text FROM pqjobs_signal WHERE job_id = %s AND name = %s

-- name: child
-- all shelves: looked for on the hot shelf first, then on every shelf
SELECT status, result::text, error_type, last_error FROM pqjobs_job WHERE {shelf} id = %s

-- name: job_type_of
-- all shelves: a job by its id, wherever it is
SELECT job_type FROM pqjobs_job WHERE id = %s

-- name: add_signal
INSERT INTO pqjobs_signal (job_id, name, payload, sent_at) VALUES (%s, %s, %s::jsonb, now()) ON CONFLICT (job_id, name) DO NOTHING RETURNING id
