-- enqueue_many gives fair jobs their turns in its own INSERT (issue 42, item 4): the turn
-- rule moves into pqjobs_fair_start (a key's start and the length of its turns), asked once
-- per statement for the keys of its rows, and the row trigger pqjobs_job_fair_turn asks it
-- for its one row. 100,000 fair jobs of one key took 2.5 times as long as plain ones (a
-- PL/pgSQL call and three lookups per row).

-- The rule is written once, in pqjobs_fair_start: for each of some keys, the turn its next
-- job comes after (the later of the key's last waiting turn, the head of the line and 0)
-- and the length of one of its turns (1/weight). enqueue_many asks it once per statement
-- for the keys of its rows and numbers each key's rows from there in the INSERT itself
-- (enqueue.py), so a fair job costs it no call per row: the keys new to the line in one
-- statement all start one turn after the head as it was before the statement. Any other
-- insert (enqueue_job, SQL) goes through the row trigger below, which asks it for the one
-- row's key; a volatile function sees the rows its statement inserted before, so the rows
-- of a many-row INSERT from SQL take their turns one after another.

CREATE OR REPLACE FUNCTION :"schema".pqjobs_fair_start(p_keys text[], p_priority integer)
RETURNS TABLE (key text, after double precision, step double precision)
LANGUAGE sql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Its plans are made once per session, often while the table's statistics are those of an
-- empty one: pinned to the two indexes of turns (pqjobs_job_fair_key, pqjobs_job_fair_claim).
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
    SELECT k.key,
           greatest(
               (SELECT j.fair_turn FROM :"schema".pqjobs_job j
                WHERE j.shelf = 'hot' AND j.status = 'ready' AND j.fair_turn IS NOT NULL
                  AND j.fair_key = k.key AND j.priority = p_priority
                ORDER BY j.fair_key DESC, j.priority DESC, j.fair_turn DESC
                LIMIT 1),
               h.turn, 0),
           1.0 / COALESCE((SELECT w.weight FROM :"schema".pqjobs_fair_weight w
                           WHERE w.key = k.key), 1)
    FROM (SELECT DISTINCT u.key FROM unnest(p_keys) AS u(key) WHERE u.key IS NOT NULL) k,
         (SELECT (SELECT j.fair_turn FROM :"schema".pqjobs_job j
                  WHERE j.shelf = 'hot' AND j.status = 'ready' AND j.fair_turn IS NOT NULL
                    AND j.priority = p_priority
                  ORDER BY j.priority DESC, j.fair_turn
                  LIMIT 1)) h(turn)
$$;

-- A job inserted with its fair key and due, without a turn: the turn after its key's start.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_fair_turn() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    SELECT s.after + s.step INTO NEW.fair_turn
    FROM :"schema".pqjobs_fair_start(ARRAY[NEW.fair_key], NEW.priority) s;
    RETURN NEW;
END
$$;

REVOKE ALL ON FUNCTION :"schema".pqjobs_fair_start(text[], integer) FROM PUBLIC;

-- The roles that enqueue (they may call pqjobs_anyone_listens, as migration 0016 granted
-- it) may call it: enqueue_many calls it for every statement.
DO $$
DECLARE
    grantee_name name;
BEGIN
    FOR grantee_name IN
        SELECT DISTINCT pg_catalog.pg_get_userbyid(a.grantee)
        FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
        WHERE p.oid = ':"schema".pqjobs_anyone_listens()'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I',
            ':"schema".pqjobs_fair_start(text[], integer)'::regprocedure, grantee_name);
    END LOOP;
END
$$;
