-- Durable workflows (issue 30): pqjobs_record_step(), the record of a step, a sleep or a
-- wait, planned once per server session; callable by no role until granted (the worker
-- role's, docs/guides/reliability.md).

CREATE OR REPLACE FUNCTION :"schema".pqjobs_record_step(
    p_job bigint,
    p_worker text,
    p_attempt integer,
    p_name text,
    p_kind text,
    p_result jsonb,
    p_finished boolean,
    p_wake double precision,
    p_async boolean
) RETURNS boolean
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF p_async THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO :"schema".pqjobs_step
        (job_id, name, kind, result, attempt, started_at, finished_at, wake_at)
    SELECT j.id, p_name, p_kind, p_result, j.attempts, now(),
           CASE WHEN p_finished THEN now() END, now() + make_interval(secs => p_wake)
    FROM :"schema".pqjobs_job j
    WHERE j.id = p_job AND j.status = 'running' AND j.locked_by = p_worker
      AND j.attempts = p_attempt
    ON CONFLICT (job_id, name) DO NOTHING;
    RETURN FOUND;
END
$$;

REVOKE ALL ON FUNCTION :"schema".pqjobs_record_step(
    bigint, text, integer, text, text, jsonb, boolean, double precision, boolean
) FROM PUBLIC;
