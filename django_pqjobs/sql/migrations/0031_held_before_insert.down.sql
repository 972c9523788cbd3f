-- Back to migration 0029's pause at enqueue: jobs inserted ready, then held by a statement
-- trigger after the insert; a retry into a pause held by pqjobs_flow_hold_retried.
DROP TRIGGER IF EXISTS pqjobs_job_pauses_noted ON :"schema".pqjobs_job;
DROP TRIGGER IF EXISTS pqjobs_job_pauses_noted ON :"schema".pqjobs_job_hot;
DROP TRIGGER IF EXISTS pqjobs_job_paused_at_enqueue ON :"schema".pqjobs_job_hot;
DROP TRIGGER IF EXISTS pqjobs_job_retried_paused ON :"schema".pqjobs_job_hot;
DROP FUNCTION IF EXISTS :"schema".pqjobs_flow_pauses_noted();
DROP FUNCTION IF EXISTS :"schema".pqjobs_flow_hold_paused();

CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_hold_paused() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    held bigint[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM :"schema".pqjobs_pause) THEN
        RETURN NULL;
    END IF;
    SELECT array_agg(n.id) INTO held FROM pqjobs_new n
    WHERE n.status = 'ready'
      AND (EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                   WHERE z.kind = 'queue' AND z.name = n.queue)
           OR EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                      WHERE z.kind = 'job_type' AND z.name = n.job_type));
    IF held IS NULL THEN
        RETURN NULL;  -- a pause of something else
    END IF;
    -- By primary key alone: with "AND status = 'ready'" the index of ready jobs would serve
    -- too, and the statistics may make it look cheaper. These rows were inserted ready by
    -- this very statement, which no other transaction can see yet.
    UPDATE :"schema".pqjobs_job
    SET status = 'blocked', blocked_by = 'paused', updated_at = now()
    WHERE shelf = 'hot' AND id = ANY(held);
    RETURN NULL;
END
$$;


DROP TRIGGER IF EXISTS pqjobs_job_paused_at_enqueue ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_paused_at_enqueue
AFTER INSERT ON :"schema".pqjobs_job
REFERENCING NEW TABLE AS pqjobs_new
FOR EACH STATEMENT
EXECUTE FUNCTION :"schema".pqjobs_flow_hold_paused();

REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_hold_paused() FROM PUBLIC;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_hold_retried() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
               WHERE z.kind = 'queue' AND z.name = NEW.queue)
       OR EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                  WHERE z.kind = 'job_type' AND z.name = NEW.job_type) THEN
        NEW.status := 'blocked';
        NEW.blocked_by := 'paused';
    END IF;
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS pqjobs_job_retried_paused ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_retried_paused
BEFORE UPDATE OF status ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN (NEW.status = 'ready' AND OLD.status IN ('failed', 'cancelled', 'expired'))
EXECUTE FUNCTION :"schema".pqjobs_flow_hold_retried();

REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_hold_retried() FROM PUBLIC;

DROP TRIGGER IF EXISTS pqjobs_job_fair_turn ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_fair_turn
    BEFORE INSERT ON :"schema".pqjobs_job_hot
    FOR EACH ROW
    WHEN (NEW.fair_key IS NOT NULL AND NEW.fair_turn IS NULL AND NEW.status = 'ready'
          AND NEW.run_after <= now())
    EXECUTE FUNCTION :"schema".pqjobs_fair_turn();
