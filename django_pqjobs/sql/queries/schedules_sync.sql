-- The statements of schedules/sync.py, each under its name (loaded once, at import).

-- name: sync_schedules
SELECT pg_advisory_xact_lock(%s)
