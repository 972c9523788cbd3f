-- The statements of admin/changelist.py, each under its name (loaded once, at import).

-- name: statement_timeout
SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, true)

-- name: statement_timeout_2
SELECT set_config('statement_timeout', %s, true)
