-- The statements of transitions/flow.py, each under its name (loaded once, at import).

-- name: promote_rate_blocked
-- A job blocked by its concurrency key is promoted by the trigger that frees its key's slot
-- (sql/schema/flow.sql); the statements below release what rate windows and pauses held,
-- and what a missed wake-up left blocked. Room in a window: its allowance less the starts
-- made in it and the jobs already ready to use it. The counts of ready jobs (here and in
-- promote_limit_blocked) are in their key's index order, and run with sorts off
-- (transitions/flow.py): their key's index is the one path left. Where ANALYZE had seen
-- no ready job, the claim's index of every ready job looked as cheap, and each key's count
-- read every ready job.
WITH room AS (
    SELECT r.key, r.allowance - CASE
            WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                     / r.period) * r.period)
            THEN r.used ELSE 0 END AS free
    FROM pqjobs_rate r
    WHERE EXISTS (SELECT 1 FROM pqjobs_job b
                  WHERE b.shelf = 'hot' AND b.status = 'blocked' AND b.rate_key = r.key)
), picked AS MATERIALIZED (
    -- picked once: a subquery of the UPDATE's FROM may be run again, and each run would
    -- lock and pick more
    SELECT b.id FROM room, LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM pqjobs_job r
            WHERE r.shelf = 'hot' AND r.status = 'ready' AND r.rate_key = room.key AND r.run_after <= now()
            ORDER BY r.rate_key, r.priority DESC, r.run_after
            LIMIT greatest(room.free, 0)
        ) ready
    ) ahead, LATERAL (
        SELECT id FROM pqjobs_job
        WHERE shelf = 'hot' AND status = 'blocked' AND blocked_by = 'rate' AND rate_key = room.key
        ORDER BY priority DESC, run_after, id
        LIMIT greatest(room.free - ahead.n, 0)
        FOR UPDATE SKIP LOCKED
    ) b
    WHERE room.free > 0
), promoted AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', blocked_by = NULL, updated_at = now()
    FROM picked p
    WHERE j.shelf = 'hot' AND j.id = p.id
    RETURNING j.queue
)
SELECT queue, count(*) FROM promoted GROUP BY queue

-- name: promote_limit_blocked
-- The keys that have blocked jobs, one index probe each (a loose scan of
-- pqjobs_job_blocked_key), and for each as many of its jobs held by the limit as its slot
-- has room for, less its jobs already ready: jobs held at enqueue whose release was missed
-- (the slot was given back while their INSERT's transaction was open, so the trigger that
-- gives it back could not see them).
WITH RECURSIVE held_keys AS (
    (SELECT concurrency_key AS key FROM pqjobs_job
     WHERE shelf = 'hot' AND status = 'blocked' AND concurrency_key IS NOT NULL
     ORDER BY concurrency_key LIMIT 1)
    UNION ALL
    SELECT (SELECT j.concurrency_key FROM pqjobs_job j
            WHERE j.shelf = 'hot' AND j.status = 'blocked' AND j.concurrency_key > h.key
            ORDER BY j.concurrency_key LIMIT 1)
    FROM held_keys h WHERE h.key IS NOT NULL
), room AS (
    SELECT h.key, nxt.concurrency_limit - greatest(s.running, 0) AS free
    FROM held_keys h
    JOIN pqjobs_key_slot s ON s.key = h.key
    CROSS JOIN LATERAL (
        SELECT b.concurrency_limit FROM pqjobs_job b
        WHERE b.shelf = 'hot' AND b.status = 'blocked' AND b.blocked_by = 'limit' AND b.concurrency_key = h.key
        ORDER BY b.priority DESC, b.run_after, b.id
        LIMIT 1
    ) nxt
    WHERE h.key IS NOT NULL
), picked AS MATERIALIZED (
    -- picked once: a subquery of the UPDATE's FROM may be run again, and each run would
    -- lock and pick more
    SELECT b.id FROM room, LATERAL (
        SELECT count(*) AS n FROM (
            SELECT 1 FROM pqjobs_job r
            WHERE r.shelf = 'hot' AND r.status = 'ready' AND r.concurrency_key = room.key
              AND r.run_after <= now()
            ORDER BY r.concurrency_key, r.priority DESC, r.run_after
            LIMIT greatest(room.free, 0)
        ) ready
    ) ahead, LATERAL (
        SELECT id FROM pqjobs_job
        WHERE shelf = 'hot' AND status = 'blocked' AND blocked_by = 'limit' AND concurrency_key = room.key
        ORDER BY priority DESC, run_after, id
        LIMIT greatest(room.free - ahead.n, 0)
        FOR UPDATE SKIP LOCKED
    ) b
    WHERE room.free > 0
), promoted AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', blocked_by = NULL, updated_at = now()
    FROM picked p
    WHERE j.shelf = 'hot' AND j.id = p.id
    RETURNING j.queue
)
SELECT queue, count(*) FROM promoted GROUP BY queue

-- name: unblock_resumed
WITH released AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', blocked_by = NULL, updated_at = now()
    WHERE j.shelf = 'hot' AND j.status = 'blocked' AND j.blocked_by = 'paused'
      AND NOT EXISTS (SELECT 1 FROM pqjobs_pause z
                      WHERE (z.kind = 'queue' AND z.name = j.queue)
                         OR (z.kind = 'job_type' AND z.name = j.job_type))
    RETURNING j.queue
)
SELECT queue, count(*) FROM released GROUP BY queue

-- name: pause
INSERT INTO pqjobs_pause (kind, name, paused_at, paused_by)
VALUES (%s, %s, now(), %s) ON CONFLICT (kind, name) DO NOTHING RETURNING id

-- name: hold_paused
-- In the pause's transaction: its ready jobs leave the claim order now (a job a claim holds
-- locked right now is that claim's; it starts, as it would a moment before the pause). At
-- most %(most)s, so a pause stays quick: a bigger backlog's rest is held by the claims that
-- meet it, a thousand per statement. The jobs are picked once, in a CTE computed once
-- (MATERIALIZED): in "id IN (SELECT ... LIMIT n FOR UPDATE SKIP LOCKED)" the planner may run
-- the subquery more than once, each run locking and picking n more (5 held for a limit of
-- 2, with autovacuum on).
WITH picked AS MATERIALIZED (
    SELECT id FROM pqjobs_job
    WHERE shelf = 'hot' AND status = 'ready'
      AND CASE %(kind)s WHEN 'queue' THEN queue ELSE job_type END = %(name)s
    LIMIT %(most)s
    FOR UPDATE SKIP LOCKED
)
UPDATE pqjobs_job AS j
SET status = 'blocked', blocked_by = 'paused', updated_at = now()
FROM picked
WHERE j.shelf = 'hot' AND j.id = picked.id

-- name: resume
DELETE FROM pqjobs_pause WHERE kind = %s AND name = %s RETURNING id

-- name: no_sorts
SET LOCAL enable_sort = off
