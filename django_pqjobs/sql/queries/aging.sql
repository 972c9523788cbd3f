-- The statements of transitions/aging.py, each under its name (loaded once, at import).

-- name: raise_priority
-- ready → ready, priority + 1, for the jobs of queue %(queue)s that have been due for at
-- least %(every)s seconds and unchanged for as long (updated_at: the last raise, or the
-- last change of any kind), whose priority is below the cap %(up_to)s; at most %(batch)s.
-- updated_at = now() starts a raised job's next wait, so a job is raised at most once per
-- %(every)s. A raised job loses its fair turn (fairness.sql), which was its place in the
-- line of its old priority: in the new one it takes its place by age, as a job that comes
-- back to ready does.
-- Ready jobs only, through the claim index (pqjobs_job_claim, which holds every ready job),
-- however many finished rows the table holds. A job a claim (or anyone) holds is skipped,
-- so the sweep never waits for a claim nor makes one wait; the next sweep raises it.
WITH due AS (
    SELECT id FROM pqjobs_job
    WHERE shelf = 'hot' AND status = 'ready' AND queue = %(queue)s AND priority < %(up_to)s
      AND run_after <= now() - make_interval(secs => %(every)s)
      AND updated_at <= now() - make_interval(secs => %(every)s)
    LIMIT %(batch)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pqjobs_job AS j
SET priority = j.priority + 1, updated_at = now(), fair_turn = NULL
FROM due
WHERE j.shelf = 'hot' AND j.id = due.id
