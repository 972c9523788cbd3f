-- Back to migration 0031's turn: the row trigger's function does the lookups itself, and
-- enqueue_many leaves the turns to it.

CREATE OR REPLACE FUNCTION :"schema".pqjobs_fair_turn() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Its plans are made once per session, often while the table's statistics are those of an
-- empty one, and then serve inserts of 100,000 rows in one statement: pinned to the two
-- indexes (a plan that read the table would make such an insert quadratic).
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    last_turn double precision;
    head double precision;
    key_weight integer;
BEGIN
    SELECT j.fair_turn INTO last_turn FROM :"schema".pqjobs_job j
    WHERE j.shelf = 'hot' AND j.status = 'ready' AND j.fair_turn IS NOT NULL
      AND j.fair_key = NEW.fair_key AND j.priority = NEW.priority
    ORDER BY j.fair_key DESC, j.priority DESC, j.fair_turn DESC
    LIMIT 1;
    SELECT j.fair_turn INTO head FROM :"schema".pqjobs_job j
    WHERE j.shelf = 'hot' AND j.status = 'ready' AND j.fair_turn IS NOT NULL
      AND j.priority = NEW.priority
    ORDER BY j.priority DESC, j.fair_turn
    LIMIT 1;
    SELECT w.weight INTO key_weight FROM :"schema".pqjobs_fair_weight w
    WHERE w.key = NEW.fair_key;
    NEW.fair_turn := greatest(last_turn, head, 0) + 1.0 / COALESCE(key_weight, 1);
    RETURN NEW;
END
$$;

DROP FUNCTION IF EXISTS :"schema".pqjobs_fair_start(text[], integer);
