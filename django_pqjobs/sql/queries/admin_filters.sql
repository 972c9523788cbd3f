-- The statements of admin/filters.py, each under its name (loaded once, at import).

-- name: distinct
-- all shelves: the values a filter offers, over every job
WITH RECURSIVE seen AS (
    (SELECT {column} AS value FROM pqjobs_job ORDER BY {column} LIMIT 1)
    UNION ALL
    SELECT (SELECT {column} FROM pqjobs_job WHERE {column} > seen.value
            ORDER BY {column} LIMIT 1)
    FROM seen WHERE seen.value IS NOT NULL
)
SELECT value FROM seen WHERE value IS NOT NULL LIMIT 500
