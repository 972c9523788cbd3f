-- The statements of worker/reporting.py, each under its name (loaded once, at import).

-- name: mark_loop
WITH marked AS (
    UPDATE pqjobs_worker SET loop_at = now() - make_interval(secs => %s) WHERE worker_id = %s
)
SELECT worker_id, queues FROM pqjobs_worker
WHERE heartbeat_at > now() - make_interval(secs => %s)
