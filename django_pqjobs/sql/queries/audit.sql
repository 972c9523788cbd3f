-- The statements of audit.py, each under its name (loaded once, at import).

-- name: record_jobs
-- all shelves: the type of a job by its id, wherever it is
INSERT INTO pqjobs_audit (at, actor, action, job_id, target, detail) SELECT now(), %s, %s, t.job_id, COALESCE(t.target, j.job_type, ''), t.detail FROM unnest(%s::bigint[], %s::text[], %s::text[]) AS t(job_id, target, detail) LEFT JOIN pqjobs_job j ON j.id = t.job_id

-- name: record
INSERT INTO pqjobs_audit (at, actor, action, schedule_id, target, detail) VALUES (now(), %s, %s, %s, %s, %s)

-- name: job_events
SELECT at, actor, action, detail FROM pqjobs_audit WHERE job_id = %s ORDER BY id DESC LIMIT %s

-- name: prune
DELETE FROM pqjobs_audit WHERE id IN (
    SELECT id FROM pqjobs_audit WHERE at < now() - make_interval(secs => %s)
    ORDER BY at LIMIT %s
)

-- name: may_prune
SELECT has_table_privilege('pqjobs_audit', 'DELETE')
