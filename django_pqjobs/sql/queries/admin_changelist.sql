-- The statements of admin/changelist.py, each under its name (loaded once, at import).

-- name: swap_timeout
SELECT current_setting('statement_timeout'), set_config('statement_timeout', %s, true)

-- name: restore_timeout
SELECT set_config('statement_timeout', %s, true)
