-- The statements of composition.py, each under its name (loaded once, at import).

-- name: join_batch
UPDATE pqjobs_job SET batch_id = %s WHERE id = ANY(%s)

-- name: count_members
UPDATE pqjobs_batch SET total = total + %s, pending = pending + %s WHERE id = %s

-- name: lock_prerequisites
SELECT id, status FROM pqjobs_job WHERE id = ANY(%s) ORDER BY id FOR NO KEY UPDATE

-- name: mark_prerequisites
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
UPDATE pqjobs_job SET sequence_key = %s WHERE id = %s

-- name: status
SELECT status FROM pqjobs_job WHERE id = %s

-- name: waited_for
SELECT depends_on_id FROM pqjobs_dependency WHERE job_id = %s ORDER BY depends_on_id DESC LIMIT 1
