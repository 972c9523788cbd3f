-- The statements of tasks/resolver.py, each under its name (loaded once, at import).

-- name: running_task_job
-- {backend_key} stands for tasks.payload.BACKEND_KEY.
SELECT EXISTS (
    SELECT 1 FROM pqjobs_job
    WHERE shelf = 'hot' AND status = 'running' AND job_type = %s
      AND jsonb_typeof(payload -> '{backend_key}') = 'string'
)
