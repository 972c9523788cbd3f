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

-- A job with a fair key is never held here, so it does not matter whether this fires before
-- or after pqjobs_job_fair_turn or pqjobs_job_paused_at_enqueue (BEFORE triggers fire in
-- name order; test_fair_claiming.py renames the turn's to check both orders).
DROP TRIGGER IF EXISTS pqjobs_job_admit ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_admit
BEFORE INSERT ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
EXECUTE FUNCTION :"schema".pqjobs_flow_admit();

-- A job inserted into a paused queue, or of a paused job type, is inserted held (blocked,
-- 'paused'): written once, never ready for a moment; resuming releases it
-- (transitions/flow.py). The pauses are read once per INSERT statement, before its first
-- row, with the owner's rights (a role that enqueues may not read pqjobs_pause), and noted
-- in a transaction-local setting, pqjobs.paused: '{}' when nothing is paused, else the
-- paused names as a text array ('q:<queue>', 't:<job type>'). The row trigger's WHEN reads
-- that setting without a call: a job whose queue and type are not paused costs a
-- comparison; nothing is joined, so the cost is linear in the rows whatever the
-- statistics. enqueue_many reads the note in its own rows (enqueue.py, _PAUSED_NOTE) and
-- inserts the jobs it pauses held already: the WHEN passes over them. A pause committed
-- while such an INSERT's transaction is open is not seen here; the claim holds those jobs
-- when it meets them.
--
-- The setting is a note, not a grant: every INSERT statement on the job table (or its hot
-- partition) writes it afresh before its first row, so a value a client set earlier in its
-- transaction is never read. A row inserted where no statement noted the pauses (the
-- setting empty or missing) is checked against pqjobs_pause itself. A client that changes
-- the setting in the middle of its own INSERT statement (a volatile expression in the rows
-- it inserts) can leave its own job ready in a paused queue, no more: the claim reads
-- pqjobs_pause with the owner's rights and holds every paused job it meets
-- (claim.sql), so no job of a paused queue or type starts.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_pauses_noted() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM set_config('pqjobs.paused', COALESCE(
        (SELECT array_agg(CASE z.kind WHEN 'queue' THEN 'q:' ELSE 't:' END
                                     || z.name ORDER BY z.kind, z.name)::text
         FROM :"schema".pqjobs_pause z),
        '{}'), true);
    RETURN NULL;
END
$$;

-- Statement triggers are not cloned to partitions: one on the table Django writes, one on
-- the hot partition for an INSERT naming it.
DROP TRIGGER IF EXISTS pqjobs_job_pauses_noted ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_pauses_noted
BEFORE INSERT ON :"schema".pqjobs_job
FOR EACH STATEMENT
EXECUTE FUNCTION :"schema".pqjobs_flow_pauses_noted();

DROP TRIGGER IF EXISTS pqjobs_job_pauses_noted ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_pauses_noted
BEFORE INSERT ON :"schema".pqjobs_job_hot
FOR EACH STATEMENT
EXECUTE FUNCTION :"schema".pqjobs_flow_pauses_noted();

-- One pause rule for a job about to be ready: inserted (above), or retried (failed,
-- cancelled or expired → ready). Held: blocked, 'paused'. A job inserted blocked by its
-- concurrency or rate key (pqjobs_flow_admit fires first) is held by the pause instead:
-- resumed, it is ready, and the claim applies its key's limit. On INSERT, a row the WHEN
-- found listed in this statement's note is held without another read; with no note (see
-- above), and on a retry (an UPDATE: no statement noted anything), pqjobs_pause is read.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_hold_paused() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'UPDATE' OR COALESCE(current_setting('pqjobs.paused', true), '') = '' THEN
        -- no note of this statement's: the pauses themselves
        IF NOT EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                       WHERE z.kind = 'queue' AND z.name = NEW.queue)
           AND NOT EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                           WHERE z.kind = 'job_type' AND z.name = NEW.job_type) THEN
            RETURN NEW;
        END IF;
    END IF;
    NEW.status := 'blocked';
    NEW.blocked_by := 'paused';
    RETURN NEW;
END
$$;

-- Whichever of pqjobs_job_admit and pqjobs_job_fair_turn fires first: the WHEN takes a job
-- the admission held by its key as ready, the admission leaves a job held by a pause held
-- (and makes the key's slot and rate rows either way: the claim needs them once the job is
-- resumed), and a fair job takes its turn whether ready or held by a pause.
DROP TRIGGER IF EXISTS pqjobs_job_paused_at_enqueue ON :"schema".pqjobs_job;
DROP TRIGGER IF EXISTS pqjobs_job_paused_at_enqueue ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_paused_at_enqueue
BEFORE INSERT ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN ((NEW.status = 'ready' OR NEW.blocked_by IN ('limit', 'rate'))
      AND COALESCE(pg_catalog.current_setting('pqjobs.paused', true), '') <> '{}'
      AND (COALESCE(pg_catalog.current_setting('pqjobs.paused', true), '') = ''
           OR pg_catalog.current_setting('pqjobs.paused', true)::text[]
              && ARRAY['q:' || NEW.queue, 't:' || NEW.job_type]))
EXECUTE FUNCTION :"schema".pqjobs_flow_hold_paused();

-- A job retried into a paused queue, or of a paused job type, is held at once, as one
-- enqueued there is: resuming releases it. Left ready, it woke the workers, and the claim
-- that met it held it; a resume committed while that claim was under way released nothing
-- the claim was holding, and the job stayed blocked by a pause gone until the flow sweep.
-- Fires before pqjobs_job_status_guard (name order), which lets the held retry through.
DROP TRIGGER IF EXISTS pqjobs_job_retried_paused ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_retried_paused
BEFORE UPDATE OF status ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN (NEW.status = 'ready' AND OLD.status IN ('failed', 'cancelled', 'expired'))
EXECUTE FUNCTION :"schema".pqjobs_flow_hold_paused();
