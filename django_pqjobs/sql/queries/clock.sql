-- The statements of clock.py, each under its name (loaded once, at import).

-- name: database_now
SELECT now()
