-- The statements of transitions/flow.py, each under its name (loaded once, at import).

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
