-- Back from migration 0016: EXECUTE for PUBLIC again on every function, as the code of
-- migration 0015 expects (its roles were documented with it). The function bodies stay as
-- 0016 made them: same signatures and behaviour, with their search_path pinned, which that
-- code runs unchanged; restoring the unpinned ones would only restore the hole.

GRANT EXECUTE ON FUNCTION :"schema".pqjobs_enqueue(
    text, text, jsonb, integer, integer, timestamptz, double precision, double precision,
    text, bigint, bigint, text, jsonb, text, integer, text, integer, double precision
) TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_anyone_listens() TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_claim(text, integer, text[], integer) TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_complete(text, jsonb) TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_batch_seal(bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_batch_finished(bigint) TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_settle() TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_note_changes() TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_flow_rows() TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_flow_slot_freed() TO PUBLIC;
GRANT EXECUTE ON FUNCTION :"schema".pqjobs_announce_finish() TO PUBLIC;
