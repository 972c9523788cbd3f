-- Fair claiming (@job(fair_key=...)): workers share out due jobs of equal priority by key,
-- in weighted turns, instead of by age; a key with 100,000 jobs waiting and a key with 10
-- both progress.
--
-- Each job that carries a fair key and is due when enqueued is given a turn (fair_turn) as
-- it is inserted: one turn after the later of its key's last waiting turn and the
-- turn now at the head of the line (the lowest of the ready jobs of its priority), a
-- turn being 1/weight of a key's weight (pqjobs_fair_weight; 1 without a row). So a new
-- key starts at the head, never behind another key's backlog, and a key idle for a while
-- saves up no turns. The claim (claim.sql) takes jobs with a turn in turn order
-- (pqjobs_job_fair_claim) and clears the turn: a job that comes back to ready later (a
-- retry, a snooze, a rescue, a woken workflow) takes its place by age, as do jobs delayed
-- when enqueued. Jobs without a fair key never get one and are claimed as before.
--
-- Enqueuers of one key read each other's last turn, never lock it: two at once may give
-- their jobs the same turn, which the job id orders. The functions run with the owner's
-- rights (SECURITY DEFINER), so roles that enqueue need no grant on pqjobs_fair_weight.
--
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

-- A job inserted held by a pause (enqueue_many writes it so: sql/schema/flow.sql) takes
-- its turn as one inserted ready does, and keeps it while it is held. The WHEN holds
-- whichever BEFORE INSERT trigger fires first: pqjobs_job_admit never holds a job with a
-- fair key, and pqjobs_job_paused_at_enqueue holds it 'paused', which the WHEN takes as
-- ready (test_fair_claiming.py renames the triggers to check both orders).
DROP TRIGGER IF EXISTS pqjobs_job_fair_turn ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_fair_turn
    BEFORE INSERT ON :"schema".pqjobs_job_hot
    FOR EACH ROW
    WHEN (NEW.fair_key IS NOT NULL AND NEW.fair_turn IS NULL
          AND (NEW.status = 'ready' OR NEW.blocked_by = 'paused')
          AND NEW.run_after <= now())
    EXECUTE FUNCTION :"schema".pqjobs_fair_turn();
