-- Back to pqjobs_enqueue() as migration 0016 left it: no checks of its arguments.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_enqueue(
    p_job_type text,
    p_queue text,
    p_payload jsonb,
    p_priority integer,
    p_max_attempts integer,
    p_run_at timestamptz,
    p_delay_seconds double precision,
    p_timeout_seconds double precision,
    p_dedupe_key text,
    p_parent_id bigint,
    p_schedule_id bigint,
    p_notify_channel text,
    p_trace_context jsonb DEFAULT NULL,
    p_concurrency_key text DEFAULT NULL,
    p_concurrency_limit integer DEFAULT NULL,
    p_rate_key text DEFAULT NULL,
    p_rate_limit integer DEFAULT NULL,
    p_rate_period double precision DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
BEGIN
    IF p_dedupe_key IS NULL THEN
        -- Two INSERTs on purpose: ON CONFLICT cannot be made conditional without dynamic
        -- SQL, which would lose the cached plan. Without a key no conflict is possible,
        -- so this one spares the server the arbiter-index work.
        INSERT INTO :"schema".pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            trace_context, created_at, updated_at, concurrency_key, concurrency_limit,
            rate_key, rate_limit, rate_period
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts,
            COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds),
            p_timeout_seconds, NULL, p_parent_id, p_schedule_id, '', '', p_trace_context,
            now(), now(), p_concurrency_key, p_concurrency_limit, p_rate_key, p_rate_limit,
            p_rate_period
        )
        RETURNING id INTO new_id;
    ELSE
        INSERT INTO :"schema".pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            trace_context, created_at, updated_at, concurrency_key, concurrency_limit,
            rate_key, rate_limit, rate_period
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts,
            COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds),
            p_timeout_seconds, p_dedupe_key, p_parent_id, p_schedule_id, '', '',
            p_trace_context, now(), now(), p_concurrency_key, p_concurrency_limit,
            p_rate_key, p_rate_limit, p_rate_period
        )
        ON CONFLICT (job_type, dedupe_key)
            WHERE dedupe_key IS NOT NULL AND status IN ('ready', 'blocked', 'running')
            DO NOTHING
        RETURNING id INTO new_id;
    END IF;
    IF new_id IS NOT NULL AND p_notify_channel IS NOT NULL
       AND :"schema".pqjobs_anyone_listens() THEN
        PERFORM pg_notify(p_notify_channel, p_queue);
    END IF;
    RETURN new_id;
END
$$;
