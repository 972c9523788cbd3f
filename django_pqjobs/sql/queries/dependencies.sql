-- The statements of transitions/dependencies.py, each under its name (loaded once, at import).

-- name: make_wait
UPDATE pqjobs_job SET status = %s, waiting_for = %s, on_dependency_failure = %s,
       finished_at = CASE WHEN %s = 'cancelled' THEN now() END,
       error_type = %s, last_error = %s, updated_at = now()
WHERE shelf = 'hot' AND id = %s
