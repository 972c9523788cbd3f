-- Flow control's bookkeeping, kept by the database however a job's status changes (worker,
-- rescue, admin, code) and whoever changes it.
--
-- pqjobs_key_slot counts the running jobs of each concurrency key, pqjobs_rate the starts of
-- each rate bucket in its window (the claim, claim.sql, takes slots and allowances). These
-- trigger functions run with the owner's rights (SECURITY DEFINER), so roles that finish,
-- retry or delete jobs need no grant on those tables. Status changes made here:
-- blocked → ready (the next job held on a key whose slot was given back).

-- A job left running (any way, or was deleted while running): give its slot back and
-- release the next job held on that key.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_slot_freed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    promoted RECORD;
BEGIN
    UPDATE :"schema".pqjobs_key_slot SET running = greatest(running - 1, 0)
    WHERE key = OLD.concurrency_key;
    UPDATE :"schema".pqjobs_job SET status = 'ready', blocked_by = NULL, updated_at = now()
    WHERE id = (
        SELECT id FROM :"schema".pqjobs_job
        WHERE status = 'blocked' AND blocked_by = 'limit'
          AND concurrency_key = OLD.concurrency_key
        ORDER BY priority DESC, run_after, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING queue INTO promoted;
    IF FOUND THEN
        PERFORM pg_notify('pqjobs', promoted.queue);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS pqjobs_job_left_running ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_left_running
AFTER UPDATE OF status ON :"schema".pqjobs_job
FOR EACH ROW
WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.concurrency_key IS NOT NULL)
EXECUTE FUNCTION :"schema".pqjobs_flow_slot_freed();

DROP TRIGGER IF EXISTS pqjobs_job_deleted_running ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_deleted_running
AFTER DELETE ON :"schema".pqjobs_job
FOR EACH ROW
WHEN (OLD.status = 'running' AND OLD.concurrency_key IS NOT NULL)
EXECUTE FUNCTION :"schema".pqjobs_flow_slot_freed();

-- A job with a concurrency or rate key was inserted: make sure its slot and bucket rows
-- exist, so the claim finds them.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_rows() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NEW.concurrency_key IS NOT NULL THEN
        INSERT INTO :"schema".pqjobs_key_slot (key, running, last_grant)
        VALUES (NEW.concurrency_key, 0, 0) ON CONFLICT DO NOTHING;
    END IF;
    IF NEW.rate_key IS NOT NULL THEN
        INSERT INTO :"schema".pqjobs_rate (key, allowance, period, used, last_grant)
        VALUES (NEW.rate_key, NEW.rate_limit, NEW.rate_period, 0, 0) ON CONFLICT DO NOTHING;
        -- a declaration that changed takes effect with the next job enqueued
        UPDATE :"schema".pqjobs_rate SET allowance = NEW.rate_limit, period = NEW.rate_period
        WHERE key = NEW.rate_key
          AND (allowance, period) IS DISTINCT FROM (NEW.rate_limit, NEW.rate_period);
    END IF;
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS pqjobs_job_flow_rows ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_flow_rows
AFTER INSERT ON :"schema".pqjobs_job
FOR EACH ROW
WHEN (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
EXECUTE FUNCTION :"schema".pqjobs_flow_rows();
