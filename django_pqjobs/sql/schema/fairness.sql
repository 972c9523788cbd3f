-- Fair claiming (@job(fair_key=...)): workers share out due jobs of equal priority by key,
-- in weighted turns, instead of by age; a key with 100,000 jobs waiting and a key with 10
-- both progress.
--
-- Each job that carries a fair key and is due when enqueued is given a turn (fair_turn) by
-- the trigger below: one turn after the later of its key's last waiting turn and the
-- turn now at the head of the line (the lowest of the ready jobs of its priority), a
-- turn being 1/weight of a key's weight (pqjobs_fair_weight; 1 without a row). So a new
-- key starts at the head, never behind another key's backlog, and a key idle for a while
-- saves up no turns. The claim (claim.sql) takes jobs with a turn in turn order
-- (pqjobs_job_fair_claim) and clears the turn: a job that comes back to ready later (a
-- retry, a snooze, a rescue, a woken workflow) takes its place by age, as do jobs delayed
-- when enqueued. Jobs without a fair key never get one and are claimed as before.
--
-- Enqueuers of one key read each other's last turn, never lock it: two at once may give
-- their jobs the same turn, which the job id orders. The function runs with the owner's
-- rights (SECURITY DEFINER), so roles that enqueue need no grant on pqjobs_fair_weight; it
-- takes no argument but the row being inserted.

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
