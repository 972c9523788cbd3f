-- A job enqueued into a pause is inserted held (issue 40, item 2): the pauses in force are
-- read once per INSERT statement, before its rows (pqjobs_flow_pauses_noted, into the
-- transaction-local setting pqjobs.paused), and a BEFORE row trigger holds the rows they
-- pause; enqueue_many reads the note in its own rows and inserts them held. The fair turn
-- is given to a job inserted held as to one inserted ready. A job was inserted ready, then
-- held by a second write (pqjobs_flow_hold_paused, a statement trigger after the insert):
-- 50,000 jobs into a paused queue took about twice the time of 50,000 anywhere else. One
-- pause rule for inserts and retries: pqjobs_flow_hold_retried is folded into
-- pqjobs_flow_hold_paused.

DROP TRIGGER IF EXISTS pqjobs_job_paused_at_enqueue ON :"schema".pqjobs_job;
DROP TRIGGER IF EXISTS pqjobs_job_retried_paused ON :"schema".pqjobs_job_hot;
DROP FUNCTION IF EXISTS :"schema".pqjobs_flow_hold_retried();

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

-- Fires after pqjobs_job_admit and pqjobs_job_fair_turn (triggers fire in name order): the
-- admission makes the key's slot and rate rows (the claim needs them once the job is
-- resumed), and a fair job takes its turn as it would ready, kept while it is held.
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

-- A job inserted held by a pause (enqueue_many writes it so: sql/schema/flow.sql) takes
-- its turn as one inserted ready does, and keeps it while it is held.
DROP TRIGGER IF EXISTS pqjobs_job_fair_turn ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_fair_turn
    BEFORE INSERT ON :"schema".pqjobs_job_hot
    FOR EACH ROW
    WHEN (NEW.fair_key IS NOT NULL AND NEW.fair_turn IS NULL
          AND (NEW.status = 'ready' OR NEW.blocked_by = 'paused')
          AND NEW.run_after <= now())
    EXECUTE FUNCTION :"schema".pqjobs_fair_turn();

REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_pauses_noted() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_hold_paused() FROM PUBLIC;
