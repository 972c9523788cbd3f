-- Who may call what.
--
-- PostgreSQL grants EXECUTE on every new function to PUBLIC: taken back here from all of
-- ours. A deployment grants the public SQL API to its own roles (docs/guides/reliability.md,
-- "The trust boundary"):
--   pqjobs_enqueue, pqjobs_anyone_listens   roles that enqueue, retry or run jobs now
--                                           (with SELECT on pqjobs_protected_type)
--   pqjobs_claim, pqjobs_complete           the worker role
--   pqjobs_batch_seal                       roles that open batches (batch())
--   pqjobs_record_step                      the worker role (durable workflows' steps)
--   pqjobs_history_prepare,                 the worker role (the history partitions its
--   pqjobs_history_drop                     maintenance makes and drops)
-- The others are internal, callable by no client role: trigger functions fire without
-- EXECUTE (and without it no role can attach them to a table of its own), and the
-- settling and batch functions call each other with the owner's rights.
--
-- Every function pins its search_path to pg_catalog, pg_temp and names our tables with
-- their schema: no object another role can create (in a schema it may write, or in its
-- temporary schema) is ever looked up in them, whoever calls them.

REVOKE ALL ON FUNCTION :"schema".pqjobs_enqueue(
    text, text, jsonb, integer, integer, timestamptz, double precision, double precision,
    text, bigint, bigint, text, jsonb, text, integer, text, integer, double precision,
    double precision, smallint, timestamptz, double precision, smallint, text
) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_anyone_listens() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_claim(text, integer, text[], integer, integer) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_complete(text, jsonb) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_batch_seal(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_prepare(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_drop(text, date) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_record_step(
    bigint, text, integer, text, text, jsonb, boolean, double precision, boolean
) FROM PUBLIC;
-- internal
REVOKE ALL ON FUNCTION :"schema".pqjobs_batch_finished(bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_settle() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_note_changes() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_admit() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_hold_paused() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_hold_retried() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_flow_slot_freed() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_announce_finish() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_fair_turn() FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_attempts_back() FROM PUBLIC;
