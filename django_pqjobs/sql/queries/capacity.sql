-- The statements of capacity.py, each under its name (loaded once, at import).

-- name: read
SELECT name, concurrency FROM pqjobs_concurrency WHERE name = ANY(%s)
