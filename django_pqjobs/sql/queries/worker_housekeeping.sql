-- The statements of worker/housekeeping.py, each under its name (loaded once, at import).

-- name: prune
WITH doomed AS (
    SELECT id FROM pqjobs_job
    WHERE shelf = 'hot' AND status = %(status)s
      AND finished_at < now() - make_interval(secs => %(age)s)
    ORDER BY finished_at
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pqjobs_job j USING doomed WHERE j.shelf = 'hot' AND j.id = doomed.id
RETURNING j.id

-- name: forget
SELECT pqjobs_job_forget(%s::bigint[])

-- name: prune_batches
DELETE FROM pqjobs_batch b  -- all shelves: its members and callbacks, shelved ones too
WHERE b.finished_at < now() - make_interval(secs => %(age)s)
  AND NOT EXISTS (SELECT 1 FROM pqjobs_job j WHERE j.batch_id = b.id)
  AND NOT EXISTS (SELECT 1 FROM pqjobs_job j WHERE j.callback_of_id = b.id)

-- name: prune_sequences
WITH gone AS (  -- all shelves: a sequence's last job, wherever it is
    SELECT s.key, s.last_job_id FROM pqjobs_sequence s
    WHERE NOT EXISTS (SELECT 1 FROM pqjobs_job j WHERE j.id = s.last_job_id)
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM pqjobs_sequence s USING gone
WHERE s.key = gone.key AND s.last_job_id IS NOT DISTINCT FROM gone.last_job_id
RETURNING s.last_job_id

-- name: job_table_health
SELECT s.n_dead_tup, s.n_live_tup,
       current_setting('autovacuum')::boolean
       AND NOT coalesce('autovacuum_enabled=false' = ANY(c.reloptions), false)
FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
WHERE s.relid = 'pqjobs_job_hot'::regclass

-- name: any_flow_blocked
SELECT EXISTS (SELECT 1 FROM pqjobs_job
               WHERE shelf = 'hot' AND status = 'blocked' AND rate_key IS NOT NULL),
       EXISTS (SELECT 1 FROM pqjobs_job
               WHERE shelf = 'hot' AND status = 'blocked' AND concurrency_key IS NOT NULL
                 AND blocked_by = 'limit')

-- name: vacuum_lock
SELECT pg_try_advisory_lock(%s)

-- name: vacuum
VACUUM (ANALYZE) pqjobs_job_hot, pqjobs_attempt_hot

-- name: vacuum_unlock
SELECT pg_advisory_unlock(%s)

-- name: flow_lock
SELECT pg_try_advisory_xact_lock(%s)

-- name: aging_lock
SELECT pg_try_advisory_xact_lock(%s)
