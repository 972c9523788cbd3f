-- Flow control's bookkeeping, kept by the database however a job's status changes (worker,
-- rescue, admin, code) and whoever changes it.
--
-- pqjobs_key_slot counts the running jobs of each concurrency key, pqjobs_rate the starts of
-- each rate bucket in its window (the claim, claim.sql, takes slots and allowances). These
-- trigger functions run with the owner's rights (SECURITY DEFINER), so roles that finish,
-- retry, delete or enqueue jobs need no grant on those tables. Status changes made here:
-- blocked → ready (the next job held on a key whose slot was given back), and, at enqueue,
-- ready → blocked (a job flow control holds already).

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
    WHERE shelf = 'hot' AND id = (
        SELECT id FROM :"schema".pqjobs_job
        WHERE shelf = 'hot' AND status = 'blocked' AND blocked_by = 'limit'
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

DROP TRIGGER IF EXISTS pqjobs_job_left_running ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_left_running
AFTER UPDATE OF status ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.concurrency_key IS NOT NULL)
EXECUTE FUNCTION :"schema".pqjobs_flow_slot_freed();

DROP TRIGGER IF EXISTS pqjobs_job_deleted_running ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_deleted_running
AFTER DELETE ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN (OLD.status = 'running' AND OLD.concurrency_key IS NOT NULL)
EXECUTE FUNCTION :"schema".pqjobs_flow_slot_freed();

-- A job with a concurrency or rate key is inserted: make sure its slot and bucket rows exist
-- (the claim finds them there), and hold at once a job due now that could not start anyway:
-- its key already has as many jobs running or ready (of its priority or higher) as its
-- limit, or its rate window as many starts made or ready as its allowance. Such a job is
-- inserted blocked, never enters the claim's index, and is released by the transition that
-- frees it (the slot given back, above; a new rate window, transitions/flow.py), or by the
-- flow sweep, which catches a release missed while this job's transaction was open. Jobs
-- of a higher priority than those ready stay ready: the claim, the one place that decides
-- who starts, holds back the lower ones. Reads without locks: two enqueuers at once may
-- both leave a job ready, and the claim holds the one too many.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_admit() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Planned once per session, often on an empty table's statistics, then used for inserts of
-- 100,000 rows in one statement: pinned to the indexes of ready keyed jobs. Sequential scans
-- off is not enough: where ANALYZE saw no ready job, the claim's index of every ready job
-- cost less, and each new row read all the ready jobs (20,000 keyed jobs beside 60,000
-- ready ones: 6 minutes). The ORDER BY of the counts is their key's index order, which no
-- other index gives, and sorts are off: any other index would need a sort, so theirs is
-- the one path left whatever the statistics.
SET enable_seqscan = off
SET enable_bitmapscan = off
SET enable_sort = off
AS $$
DECLARE
    free integer;
    waiting integer;
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
    IF NEW.status <> 'ready' OR NEW.run_after > now() OR NEW.fair_key IS NOT NULL THEN
        -- Not due: the claim decides when it is. With a fair key: the claim, which takes
        -- turns, decides which of the key's jobs start (held here, they would wait in age
        -- order behind the other tenants' jobs).
        RETURN NEW;
    END IF;
    IF NEW.rate_key IS NOT NULL THEN
        SELECT r.allowance - CASE
                WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                         / r.period) * r.period)
                THEN r.used ELSE 0 END
        INTO free
        FROM :"schema".pqjobs_rate r WHERE r.key = NEW.rate_key;
        SELECT count(*) INTO waiting FROM (
            SELECT 1 FROM :"schema".pqjobs_job j
            WHERE j.shelf = 'hot' AND j.status = 'ready' AND j.rate_key = NEW.rate_key
              AND j.priority >= NEW.priority AND j.run_after <= now()
            ORDER BY j.rate_key, j.priority DESC, j.run_after
            LIMIT greatest(free, 0)
        ) ahead;
        IF waiting >= free THEN
            NEW.status := 'blocked';
            NEW.blocked_by := 'rate';
            RETURN NEW;
        END IF;
    END IF;
    IF NEW.concurrency_key IS NOT NULL THEN
        SELECT NEW.concurrency_limit - greatest(s.running, 0) INTO free
        FROM :"schema".pqjobs_key_slot s WHERE s.key = NEW.concurrency_key;
        SELECT count(*) INTO waiting FROM (
            SELECT 1 FROM :"schema".pqjobs_job j
            WHERE j.shelf = 'hot' AND j.status = 'ready'
              AND j.concurrency_key = NEW.concurrency_key
              AND j.priority >= NEW.priority AND j.run_after <= now()
            ORDER BY j.concurrency_key, j.priority DESC, j.run_after
            LIMIT greatest(free, 0)
        ) ahead;
        IF waiting >= free THEN
            NEW.status := 'blocked';
            NEW.blocked_by := 'limit';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

-- Fires before pqjobs_job_fair_turn (triggers fire in name order): a job held at enqueue
-- gets no fair turn.
DROP TRIGGER IF EXISTS pqjobs_job_admit ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_admit
BEFORE INSERT ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
EXECUTE FUNCTION :"schema".pqjobs_flow_admit();

-- Jobs inserted into a paused queue, or of a paused job type, are held at once (blocked,
-- 'paused'); resuming releases them (transitions/flow.py). Once per INSERT statement, not
-- per row, and nothing more while nothing is paused: most enqueues pay one lookup of an
-- empty table. A pause committed while such an INSERT's transaction is open is not seen
-- here; the claim holds those jobs when it meets them.
--
-- Linear in the rows inserted whatever the statistics: the new rows a pause holds are
-- picked from the transition table alone (one pass, a probe of the pause's unique index
-- each), then held by primary key. Never a join of the transition table with the job
-- table, nor the index of ready jobs: once ANALYZE had seen no ready job, the planner drove
-- such a join from the ready jobs and scanned every new row for each (4,000 jobs: 13 s
-- beside a pause of another queue).
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

-- A job retried (failed, cancelled or expired → ready) into a paused queue, or of a paused
-- job type, is held at once, as one enqueued there is: resuming releases it. Left ready, it
-- woke the workers, and the claim that met it held it; a resume committed while that claim
-- was under way released nothing the claim was holding, and the job stayed blocked by a
-- pause gone until the flow sweep (a minute).
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
