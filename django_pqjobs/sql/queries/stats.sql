-- The statements of stats.py, each under its name (loaded once, at import).

-- name: add
WITH outcomes AS (
    INSERT INTO pqjobs_outcome_count AS c
        (job_type, queue, outcome, count, duration_ms, updated_at)
    SELECT t.job_type, t.queue, t.outcome, t.count, t.ms, now()
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::bigint[], %s::bigint[])
         WITH ORDINALITY AS t(job_type, queue, outcome, count, ms, n)
    ORDER BY t.n
    ON CONFLICT (job_type, queue, outcome) DO UPDATE
    SET count = c.count + EXCLUDED.count, duration_ms = c.duration_ms + EXCLUDED.duration_ms,
        updated_at = now()
), buckets AS (
    INSERT INTO pqjobs_duration_bucket AS b (job_type, queue, le, count)
    SELECT t.job_type, t.queue, t.le, t.count
    FROM unnest(%s::text[], %s::text[], %s::float8[], %s::bigint[])
         WITH ORDINALITY AS t(job_type, queue, le, count, n)
    ORDER BY t.n
    ON CONFLICT (job_type, queue, le) DO UPDATE SET count = b.count + EXCLUDED.count
)
SELECT 1

-- name: outcome_totals
SELECT job_type, queue, outcome, count, duration_ms FROM pqjobs_outcome_count ORDER BY job_type, queue, outcome

-- name: bucket_totals
SELECT job_type, queue, le, count FROM pqjobs_duration_bucket ORDER BY job_type, queue, le
