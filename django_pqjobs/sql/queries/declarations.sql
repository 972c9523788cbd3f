-- The statements of declarations.py, each under its name (loaded once, at import).

-- name: exists
SELECT to_regclass('pqjobs_protected_type') IS NOT NULL

-- name: upsert
INSERT INTO pqjobs_protected_type (job_type, fields) VALUES (%s, %s::jsonb)
ON CONFLICT (job_type) DO UPDATE SET fields = EXCLUDED.fields
WHERE pqjobs_protected_type.fields IS DISTINCT FROM EXCLUDED.fields

-- name: forget
DELETE FROM pqjobs_protected_type WHERE job_type = ANY(%s)

-- name: unpublished
SELECT job_type, fields::text FROM pqjobs_protected_type WHERE job_type = ANY(%s)
