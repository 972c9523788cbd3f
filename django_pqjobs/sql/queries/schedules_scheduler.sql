-- The statements of schedules/scheduler.py, each under its name (loaded once, at import).

-- name: anything_due
SELECT EXISTS (SELECT 1 FROM pqjobs_schedule
               WHERE enabled AND (next_run_at IS NULL OR next_run_at <= now()))
