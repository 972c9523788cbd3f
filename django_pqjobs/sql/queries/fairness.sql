-- The statements of fairness.py, each under its name (loaded once, at import).

-- name: set_weight
INSERT INTO pqjobs_fair_weight (key, weight, set_at, set_by) VALUES (%s, %s, now(), %s)
ON CONFLICT (key) DO UPDATE
SET weight = excluded.weight, set_at = excluded.set_at, set_by = excluded.set_by

-- name: clear_weight
DELETE FROM pqjobs_fair_weight WHERE key = %s

-- name: weights
SELECT key, weight, set_at, set_by FROM pqjobs_fair_weight ORDER BY key

-- name: fair_keys
WITH per_arm (fair_key, waiting, running, oldest) AS (
    SELECT fair_key, count(*), 0, min(run_after) FILTER (WHERE run_after <= now())
    FROM pqjobs_job
    WHERE shelf = 'hot' AND status = 'ready' AND fair_turn IS NULL AND fair_key IS NOT NULL
    GROUP BY fair_key
    UNION ALL
    SELECT fair_key, count(*), 0, min(run_after) FILTER (WHERE run_after <= now())
    FROM pqjobs_job
    WHERE shelf = 'hot' AND status = 'ready' AND fair_turn IS NOT NULL AND fair_key IS NOT NULL
    GROUP BY fair_key
    UNION ALL
    SELECT fair_key, count(*), 0, NULL
    FROM pqjobs_job WHERE shelf = 'hot' AND status = 'blocked' AND fair_key IS NOT NULL
    GROUP BY fair_key
    UNION ALL
    SELECT fair_key, 0, count(*), NULL
    FROM pqjobs_job WHERE shelf = 'hot' AND status = 'running' AND fair_key IS NOT NULL
    GROUP BY fair_key
), top AS (
    SELECT fair_key, sum(waiting) AS waiting, sum(running) AS running, min(oldest) AS oldest
    FROM per_arm GROUP BY fair_key
    ORDER BY 2 DESC, 3 DESC, fair_key
    LIMIT %s
)
SELECT t.fair_key, t.waiting, t.running,
       extract(epoch FROM now()) - extract(epoch FROM t.oldest), COALESCE(w.weight, 1)
FROM top t LEFT JOIN pqjobs_fair_weight w ON w.key = t.fair_key
ORDER BY t.waiting DESC, t.running DESC, t.fair_key

-- name: waiting_longest
SELECT fair_key, extract(epoch FROM now()) - extract(epoch FROM min(oldest)) FROM (
    SELECT fair_key, min(run_after) AS oldest FROM pqjobs_job
    WHERE shelf = 'hot' AND status = 'ready' AND fair_turn IS NULL AND fair_key IS NOT NULL
      AND run_after <= now() - make_interval(secs => %(seconds)s) {queue_filter}
    GROUP BY fair_key
    UNION ALL
    SELECT fair_key, min(run_after) FROM pqjobs_job
    WHERE shelf = 'hot' AND status = 'ready' AND fair_turn IS NOT NULL AND fair_key IS NOT NULL
      AND run_after <= now() - make_interval(secs => %(seconds)s) {queue_filter}
    GROUP BY fair_key
) arms
GROUP BY fair_key
ORDER BY min(oldest), fair_key
LIMIT %(limit)s
