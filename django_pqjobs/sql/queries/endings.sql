-- The statements of endings.py, each under its name (loaded once, at import).

-- name: cancelled_dependents
-- all shelves: finished dependents, shelved ones too
WITH RECURSIVE cancelled AS (
    SELECT j.id, j.finished_at AS at
    FROM unnest(%(roots)s::bigint[]) AS root(id)
    JOIN pqjobs_dependency d ON d.depends_on_id = root.id
    JOIN pqjobs_job j ON j.id = d.job_id
    LEFT JOIN pqjobs_job r ON r.id = root.id
    WHERE j.status = 'cancelled' AND j.error_type = 'DependencyFailed'
      AND j.finished_at = COALESCE(%(at)s, r.finished_at)
    UNION
    SELECT j.id, j.finished_at
    FROM cancelled c
    JOIN pqjobs_dependency d ON d.depends_on_id = c.id
    JOIN pqjobs_job j ON j.id = d.job_id
    WHERE j.status = 'cancelled' AND j.error_type = 'DependencyFailed' AND j.finished_at = c.at
)
SELECT id FROM cancelled ORDER BY id
