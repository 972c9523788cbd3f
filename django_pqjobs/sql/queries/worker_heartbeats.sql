-- The statements of worker/heartbeats.py, each under its name (loaded once, at import).

-- name: heartbeat
UPDATE pqjobs_job AS j
SET heartbeat_at = now()
FROM unnest(%s::bigint[], %s::int[]) AS t(id, attempt)
WHERE j.shelf = 'hot' AND j.id = t.id AND j.status = 'running' AND j.locked_by = %s
  AND j.attempts = t.attempt
RETURNING j.id, j.cancel_requested_at IS NOT NULL

-- name: worker_upsert
INSERT INTO pqjobs_worker (worker_id, hostname, pid, queues, concurrency, listening,
                           started_concurrency, max_concurrency, started_at, heartbeat_at)
VALUES (%s, %s, %s, %s::jsonb, %s, %s, %s, %s, now(), now())
ON CONFLICT (worker_id) DO UPDATE
SET heartbeat_at = now(), hostname = EXCLUDED.hostname, pid = EXCLUDED.pid,
    queues = EXCLUDED.queues, concurrency = EXCLUDED.concurrency,
    started_concurrency = EXCLUDED.started_concurrency,
    max_concurrency = EXCLUDED.max_concurrency

-- name: unregister
DELETE FROM pqjobs_worker WHERE worker_id = %s
