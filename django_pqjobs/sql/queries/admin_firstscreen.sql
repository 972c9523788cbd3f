-- The statements of admin/firstscreen.py, each under its name (loaded once, at import).

-- name: workers_seen
SELECT w.worker_id, extract(epoch FROM now() - w.heartbeat_at) FROM pqjobs_worker w WHERE w.worker_id = ANY(%s)
