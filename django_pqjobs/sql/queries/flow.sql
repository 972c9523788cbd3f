-- The statements of transitions/flow.py, each under its name (loaded once, at import).

-- name: hold_back
WITH picked AS (
    SELECT id, queue, job_type, priority, run_after, concurrency_key, concurrency_limit,
           rate_key
    FROM pqjobs_job
    WHERE status = 'ready' AND run_after <= now() {queue_filter} {priority_filter}
    ORDER BY priority DESC, run_after, id
    LIMIT %(scan)s
    FOR UPDATE SKIP LOCKED
), numbered AS (
    SELECT p.*, row_number() OVER (ORDER BY p.priority DESC, p.run_after, p.id) AS ord,
           EXISTS (SELECT 1 FROM pqjobs_pause z WHERE z.kind = 'queue' AND z.name = p.queue)
           OR EXISTS (SELECT 1 FROM pqjobs_pause z
                      WHERE z.kind = 'job_type' AND z.name = p.job_type) AS paused
    FROM picked p
), rate_room AS (
    -- no lock needed: within a window the count only grows, so a stale read can only
    -- leave too many jobs ready (the next claim holds them), never hold one that could run
    SELECT r.key, greatest(r.allowance - CASE
            WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                     / r.period) * r.period)
            THEN r.used ELSE 0 END, 0) AS room
    FROM pqjobs_rate r WHERE r.key IN (SELECT rate_key FROM numbered WHERE NOT paused)
), rated AS (
    SELECT n.*, (n.rate_key IS NOT NULL AND row_number() OVER (
                    PARTITION BY n.rate_key ORDER BY n.ord)
                 > COALESCE((SELECT room FROM rate_room WHERE key = n.rate_key), 0)) AS over
    FROM numbered n WHERE NOT n.paused
), key_room AS (
    -- locked, and read as they are now: slots are given back by other transactions
    SELECT s.key, greatest(s.running, 0) AS running FROM pqjobs_key_slot s
    WHERE s.key IN (SELECT concurrency_key FROM rated WHERE NOT over)
    FOR UPDATE SKIP LOCKED
), limited AS (
    SELECT r.id FROM (
        SELECT r.id, r.concurrency_key, r.concurrency_limit,
               row_number() OVER (PARTITION BY r.concurrency_key ORDER BY r.ord) AS key_rank
        FROM rated r WHERE NOT r.over AND r.concurrency_key IS NOT NULL
    ) r JOIN key_room k ON k.key = r.concurrency_key
    WHERE r.key_rank > r.concurrency_limit - k.running
), held AS (
    UPDATE pqjobs_job AS j
    SET status = 'blocked', updated_at = now(),
        blocked_by = CASE WHEN n.paused THEN 'paused'
                          WHEN n.id IN (SELECT id FROM rated WHERE over) THEN 'rate'
                          ELSE 'limit' END
    FROM numbered n
    WHERE j.id = n.id
      AND (n.paused OR n.id IN (SELECT id FROM rated WHERE over)
           OR n.id IN (SELECT id FROM limited))
    RETURNING j.id
)
SELECT count(*) FROM held

-- name: promote_rate_blocked
-- A job blocked by its concurrency key is promoted by the trigger that frees its key's slot
-- (migration 0009); the functions below release the jobs that rate windows and pauses held.
WITH room AS (
    SELECT r.key, r.allowance - CASE
            WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                     / r.period) * r.period)
            THEN r.used ELSE 0 END AS free
    FROM pqjobs_rate r
), promoted AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', blocked_by = NULL, updated_at = now()
    FROM (
        SELECT b.id FROM room, LATERAL (
            SELECT id FROM pqjobs_job
            WHERE status = 'blocked' AND blocked_by = 'rate' AND rate_key = room.key
            ORDER BY priority DESC, run_after, id
            LIMIT room.free
            FOR UPDATE SKIP LOCKED
        ) b
        WHERE room.free > 0
    ) p
    WHERE j.id = p.id
    RETURNING j.queue
)
SELECT queue, count(*) FROM promoted GROUP BY queue

-- name: unblock_resumed
WITH released AS (
    UPDATE pqjobs_job AS j
    SET status = 'ready', blocked_by = NULL, updated_at = now()
    WHERE j.status = 'blocked' AND j.blocked_by = 'paused'
      AND NOT EXISTS (SELECT 1 FROM pqjobs_pause z
                      WHERE (z.kind = 'queue' AND z.name = j.queue)
                         OR (z.kind = 'job_type' AND z.name = j.job_type))
    RETURNING j.queue
)
SELECT queue, count(*) FROM released GROUP BY queue

-- name: pause
INSERT INTO pqjobs_pause (kind, name, paused_at, paused_by)
VALUES (%s, %s, now(), %s) ON CONFLICT (kind, name) DO NOTHING RETURNING id

-- name: resume
DELETE FROM pqjobs_pause WHERE kind = %s AND name = %s RETURNING id
