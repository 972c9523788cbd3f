-- The statements of admin/dashboard.py, each under its name (loaded once, at import).

-- name: per_minute
-- all shelves: jobs finished in the last hour, shelved ones too
SELECT date_trunc('minute', finished_at) AS minute,
       count(*) FILTER (WHERE status = 'done'),
       count(*) FILTER (WHERE status = 'failed')
FROM pqjobs_job
WHERE status IN ('done', 'failed', 'cancelled') AND finished_at > now() - interval '1 hour'
  AND finished_at <= now()  -- a row written behind our back may say 'infinity'
GROUP BY 1

-- name: retries_per_minute
-- all shelves: attempts of the last hour, shelved ones too
SELECT date_trunc('minute', a.finished_at), count(*) FROM pqjobs_attempt a
WHERE a.finished_at > now() - interval '1 hour' AND a.finished_at <= now()
  AND a.outcome NOT IN ('released', 'snoozed', 'parked')
  AND NOT EXISTS (SELECT 1 FROM pqjobs_job j
                  WHERE j.id = a.job_id AND j.status IN ('failed', 'cancelled')
                    AND j.attempts = a.attempt)
GROUP BY 1

-- name: last_day
-- all shelves: jobs finished in the last day, shelved ones too
SELECT job_type, status, count(*) FROM pqjobs_job
WHERE status IN ('done', 'failed', 'cancelled', 'expired')
  AND finished_at > now() - interval '24 hours'
GROUP BY 1, 2

-- name: active
SELECT 'waiting', queue, count(*), NULL, 0 FROM pqjobs_job
WHERE shelf = 'hot' AND status = 'waiting' GROUP BY queue
UNION ALL
SELECT 'ready', queue, count(*),
       -- inside Python's calendar, whatever a row written behind our back says
       min(greatest(run_after, '0001-01-02 00:00+00')) FILTER (WHERE run_after <= now()),
       count(*) FILTER (WHERE fair_key IS NOT NULL)
FROM pqjobs_job WHERE shelf = 'hot' AND status = 'ready' GROUP BY queue
UNION ALL
SELECT 'blocked', queue, count(*), NULL, 0 FROM pqjobs_job
WHERE shelf = 'hot' AND status = 'blocked' GROUP BY queue
UNION ALL
SELECT 'running', queue, count(*), NULL, 0 FROM pqjobs_job
WHERE shelf = 'hot' AND status = 'running' GROUP BY queue
ORDER BY 2, 1

-- name: running_by_worker
SELECT locked_by, count(*) FROM pqjobs_job WHERE shelf = 'hot' AND status = 'running'
GROUP BY locked_by
