-- Who may call what.
--
-- PostgreSQL grants EXECUTE on every new function to PUBLIC: taken back here from all of
-- ours. A deployment grants the public SQL API to its own roles (docs/guides/reliability.md,
-- "The trust boundary"):
--   pqjobs_enqueue, pqjobs_job,             roles that enqueue, retry or run jobs now
--   pqjobs_anyone_listens                   (with SELECT on pqjobs_protected_type; the
--                                           positional pqjobs_enqueue calls the one that
--                                           takes a pqjobs_job_spec)
--   pqjobs_fair_start                       the same roles (enqueue_many asks it for the
--                                           turns of fair keys)
--   pqjobs_claim, pqjobs_complete           the worker role
--   pqjobs_batch_seal                       roles that open batches (batch())
--   pqjobs_record_step                      the worker role (durable workflows' steps)
--   pqjobs_history_prepare,                 the worker role (the history partitions its
--   pqjobs_history_drop,                    maintenance makes, fills and drops)
--   pqjobs_history_shelve
--   pqjobs_history_unshelve                 roles that retry jobs (and the admin's Skip)
--   pqjobs_job_forget                       roles that delete jobs (the admin's delete, the
--                                           worker's prune): what gone jobs leave behind
-- The others are internal, callable by no client role: trigger functions fire without
-- EXECUTE (and without it no role can attach them to a table of its own), and the
-- settling and batch functions call each other with the owner's rights.
--
-- Some roles may change jobs but not write their results (the guide's web role: UPDATE on
-- a few columns of pqjobs_job, never result): pqjobs_job_status_guard lets them make only
-- the moves their operations make (cancel, retry, a job waiting for its dependencies, a
-- workflow woken by the signal it waits for), never a job running, done, failed, expired
-- or held, nor a parked workflow ready without its signal.
--
-- Every function pins its search_path to pg_catalog, pg_temp and names our tables with
-- their schema: no object another role can create (in a schema it may write, or in its
-- temporary schema) is ever looked up in them, whoever calls them.

CREATE OR REPLACE FUNCTION :"schema".pqjobs_job_status_check() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    -- send_signal: the job waits (parked, no dependency left) for a signal that has come
    IF OLD.status = 'waiting' AND NEW.status = 'ready' AND NEW.waiting_for = 0 AND EXISTS (
        SELECT 1 FROM :"schema".pqjobs_step s
        JOIN :"schema".pqjobs_signal g ON g.job_id = s.job_id AND g.name = s.name
        WHERE s.job_id = NEW.id AND s.kind = 'signal' AND s.finished_at IS NULL
    ) THEN
        RETURN NEW;
    END IF;
    -- retry into a pause: pqjobs_job_retried_paused (its trigger fires first) held the job
    IF OLD.status IN ('failed', 'cancelled', 'expired') AND NEW.status = 'blocked'
       AND NEW.blocked_by = 'paused' THEN
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'pqjobs_job: role % may not make job % % (it was %): a role that may not '
        'write results may cancel, retry and signal jobs only', quote_ident(current_user),
        NEW.id, NEW.status, OLD.status USING ERRCODE = 'insufficient_privilege';
END
$$;

DROP TRIGGER IF EXISTS pqjobs_job_status_guard ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_status_guard
BEFORE UPDATE OF status ON :"schema".pqjobs_job
FOR EACH ROW
WHEN (OLD.status IS DISTINCT FROM NEW.status
      AND (NEW.status IN ('running', 'done', 'failed', 'expired', 'blocked')
           OR (OLD.status = 'waiting' AND NEW.status = 'ready'))
      AND NOT pg_catalog.has_column_privilege(
          ':"schema".pqjobs_job'::regclass, 'result', 'UPDATE'))
EXECUTE FUNCTION :"schema".pqjobs_job_status_check();

REVOKE ALL ON FUNCTION :"schema".pqjobs_enqueue(
    text, text, jsonb, integer, integer, timestamptz, double precision, double precision,
    text, bigint, bigint, text, jsonb, text, integer, text, integer, double precision,
    double precision, smallint, timestamptz, double precision, smallint, text
) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_enqueue(:"schema".pqjobs_job_spec) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_job(jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_anyone_listens() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_fair_start(text[], integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_claim(text, integer, text[], integer, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_complete(text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_batch_seal(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_prepare(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_drop(text, date) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_shelve(bigint[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_unshelve(bigint[], text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_job_forget(bigint[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_record_step(
    bigint, text, integer, text, text, jsonb, boolean, double precision, boolean
) FROM PUBLIC;
-- internal
REVOKE ALL ON FUNCTION :"schema".pqjobs_batch_finished(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_settle() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_note_changes() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_admit() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_hold_paused() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_pauses_noted() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_slot_freed() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_announce_finish() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_fair_turn() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_job_entry_check() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_job_status_check() FROM PUBLIC;
