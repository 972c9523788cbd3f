-- The statements of composition.py, each under its name (loaded once, at import).

-- name: join_batch
UPDATE pqjobs_job SET batch_id = %s WHERE shelf = 'hot' AND id = ANY(%s)

-- name: count_members
UPDATE pqjobs_batch SET total = total + %s, pending = pending + %s WHERE id = %s

-- name: lock_prerequisites
-- all shelves: prerequisites by id, finished ones in history too
SELECT id, status FROM pqjobs_job WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE

-- name: mark_prerequisites
-- all shelves: prerequisites by id, a failed one in history too (a retry or skip later notes it)
UPDATE pqjobs_job SET has_dependents = true WHERE id = ANY(%s) AND NOT has_dependents

-- name: add_edges
INSERT INTO pqjobs_dependency (job_id, depends_on_id)
SELECT %s, d FROM unnest(%s::bigint[]) d

-- name: sequence_turn
INSERT INTO pqjobs_sequence (key, last_job_id) VALUES (%s, NULL)
ON CONFLICT (key) DO UPDATE SET key = EXCLUDED.key
RETURNING last_job_id

-- name: sequence_next
UPDATE pqjobs_sequence SET last_job_id = %s WHERE key = %s

-- name: set_sequence
UPDATE pqjobs_job SET sequence_key = %s WHERE shelf = 'hot' AND id = %s

-- name: status
-- all shelves: a job by its id, wherever it is
SELECT status FROM pqjobs_job WHERE id = %s

-- name: waited_for
-- What a job that left its sequence waited for, of the jobs still there (an edge to a gone
-- job stays with its dependent, pqjobs_job_forget: what that job waited for was handed on)
-- all shelves: a prerequisite, finished ones in history too
SELECT d.depends_on_id FROM pqjobs_dependency d
WHERE d.job_id = %s AND EXISTS (SELECT 1 FROM pqjobs_job j WHERE j.id = d.depends_on_id)
ORDER BY d.depends_on_id DESC LIMIT 1
