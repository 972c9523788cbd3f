-- The statements of batches.py, each under its name (loaded once, at import).

-- name: create
INSERT INTO pqjobs_batch (label, callbacks) VALUES (%s, '{}') RETURNING id

-- name: set_callbacks
UPDATE pqjobs_batch SET callbacks = %s::jsonb WHERE id = %s

-- name: batch
SELECT pqjobs_batch_seal(%s)
