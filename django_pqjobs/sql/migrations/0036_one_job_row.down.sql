-- Back to the positional pqjobs_enqueue of migration 0035 (its own INSERT), without the
-- job spec type.

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
    p_rate_period double precision DEFAULT NULL,
    p_unique_for double precision DEFAULT NULL,
    p_unique_states smallint DEFAULT NULL,
    p_expires_at timestamptz DEFAULT NULL,
    p_expires_in double precision DEFAULT NULL,
    p_payload_version smallint DEFAULT NULL,
    p_fair_key text DEFAULT NULL
) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    new_id bigint;
    due timestamptz;
    deadline timestamptz;
    is_protected boolean;
    protected_fields jsonb;
    -- C0 controls and DEL, as options.py refuses them in names and keys
    control constant text := '[\x01-\x1f\x7f]';
    -- durations.MAX_DURATION: 100 years
    max_seconds constant double precision := 3153600000;
BEGIN
    -- The rules specification.py applies to every enqueue from Python, for callers that
    -- enqueue from SQL: a bad argument is refused with its name, never stored.
    -- (NaN compares greater than every number, so the upper bounds refuse it too.)
    IF p_job_type IS NULL OR btrim(p_job_type) = '' OR p_job_type ~ control THEN
        RAISE EXCEPTION 'pqjobs_enqueue: job_type must be non-empty text without control '
            'characters, got %', quote_nullable(left(p_job_type, 120))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_queue IS NULL OR btrim(p_queue) = '' OR p_queue ~ control THEN
        RAISE EXCEPTION 'pqjobs_enqueue: queue must be non-empty text without control '
            'characters, got %', quote_nullable(left(p_queue, 120))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_priority IS NULL OR p_max_attempts IS NULL OR p_max_attempts < 1 THEN
        RAISE EXCEPTION 'pqjobs_enqueue: priority must be a whole number and max_attempts '
            'at least 1, got % and %', quote_nullable(p_priority),
            quote_nullable(p_max_attempts)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_run_at IS NOT NULL
       AND NOT p_run_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00' THEN
        RAISE EXCEPTION 'pqjobs_enqueue: run_after must be between the years 1 and 9999, '
            'got %', p_run_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_delay_seconds IS NULL OR NOT (p_delay_seconds >= 0 AND p_delay_seconds <= max_seconds)
    THEN
        RAISE EXCEPTION 'pqjobs_enqueue: delay must be 0 or more seconds, at most 100 years, '
            'got %', quote_nullable(p_delay_seconds)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_timeout_seconds IS NOT NULL
       AND NOT (p_timeout_seconds > 0 AND p_timeout_seconds <= max_seconds) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: timeout must be more than 0 seconds, at most 100 '
            'years, got %', p_timeout_seconds
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_expires_at IS NOT NULL AND p_expires_in IS NOT NULL THEN
        RAISE EXCEPTION 'pqjobs_enqueue: give expires_at or expires_in, not both, got % and %',
            p_expires_at, p_expires_in
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (p_expires_in > 0 AND p_expires_in <= max_seconds) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: expires_in must be more than 0 seconds, at most 100 '
            'years, got %', p_expires_in
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT p_expires_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00' THEN
        RAISE EXCEPTION 'pqjobs_enqueue: expires_at must be between the years 1 and 9999, '
            'got %', p_expires_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    due := COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds);
    deadline := COALESCE(p_expires_at, due + make_interval(secs => p_expires_in));
    IF deadline <= due THEN
        RAISE EXCEPTION 'pqjobs_enqueue: the deadline % is not after the job is due (%): it '
            'could never start', deadline, due
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_dedupe_key = '' THEN
        RAISE EXCEPTION 'pqjobs_enqueue: dedupe_key must be NULL or non-empty text'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (p_unique_for > 0 AND p_unique_for <= max_seconds)
       OR NOT (p_unique_states BETWEEN 0 AND 7) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: unique_for must be more than 0 seconds, at most 100 '
            'years, and unique_states a mask from 0 to 7 (1 done, 2 failed, 4 cancelled), '
            'got % and %', p_unique_for, p_unique_states
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_dedupe_key IS NULL AND (p_unique_for IS NOT NULL OR p_unique_states <> 0) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: unique_for and unique_states need a dedupe_key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (p_concurrency_key IS NULL) <> (p_concurrency_limit IS NULL)
       OR p_concurrency_limit < 1 OR p_concurrency_key = '' OR p_concurrency_key ~ control THEN
        RAISE EXCEPTION 'pqjobs_enqueue: concurrency_key needs a limit (both or neither; the '
            'limit at least 1, the key non-empty without control characters), got % and %',
            quote_nullable(left(p_concurrency_key, 120)), quote_nullable(p_concurrency_limit)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (p_rate_key IS NULL) <> (p_rate_limit IS NULL)
       OR (p_rate_key IS NULL) <> (p_rate_period IS NULL) OR p_rate_limit < 1
       OR NOT (p_rate_period >= 0.001 AND p_rate_period <= max_seconds)
       OR p_rate_key = '' OR p_rate_key ~ control THEN
        RAISE EXCEPTION 'pqjobs_enqueue: rate_key needs a rate (key, limit and period, or '
            'none; the limit at least 1, the period between 1 ms and 100 years), got %, % and %',
            quote_nullable(left(p_rate_key, 120)), quote_nullable(p_rate_limit),
            quote_nullable(p_rate_period)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_fair_key = '' OR p_fair_key ~ control OR length(p_fair_key) > 255 THEN
        RAISE EXCEPTION 'pqjobs_enqueue: fair_key must be NULL or non-empty text of at most '
            '255 characters without control characters, got %',
            quote_nullable(left(p_fair_key, 120))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_payload_version < 1 THEN
        RAISE EXCEPTION 'pqjobs_enqueue: payload_version must be 1 or more, got %',
            p_payload_version
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT true, t.fields INTO is_protected, protected_fields
    FROM :"schema".pqjobs_protected_type t WHERE t.job_type = p_job_type;
    IF is_protected AND (
        CASE WHEN jsonb_typeof(protected_fields) = 'array' THEN
            -- encrypted by field: each named field the payload has must be an envelope
            jsonb_typeof(p_payload) IS DISTINCT FROM 'object' OR EXISTS (
                SELECT 1 FROM jsonb_array_elements_text(protected_fields) AS f(name)
                WHERE p_payload ? f.name
                  AND (jsonb_typeof(p_payload -> f.name -> 'pqjobs_encrypted')
                           IS DISTINCT FROM 'string'
                       OR p_payload -> f.name <> jsonb_build_object(
                              'pqjobs_encrypted', p_payload -> f.name -> 'pqjobs_encrypted')))
        ELSE
            jsonb_typeof(p_payload -> 'pqjobs_encrypted') IS DISTINCT FROM 'string'
            OR p_payload <> jsonb_build_object('pqjobs_encrypted', p_payload -> 'pqjobs_encrypted')
        END) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: job type % is encrypted at rest (%): its payload must '
            'be sealed with the keys of PQJOBS[''ENCRYPTION_KEYS''], which SQL cannot do; '
            'enqueue it from Python', quote_literal(p_job_type),
            CASE WHEN jsonb_typeof(protected_fields) = 'array'
                 THEN 'the fields ' || protected_fields::text ELSE 'the whole payload' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_dedupe_key IS NULL THEN
        -- Two INSERTs on purpose: ON CONFLICT cannot be made conditional without dynamic
        -- SQL, which would lose the cached plan. Without a key no conflict is possible,
        -- so this one spares the server the arbiter-index work.
        INSERT INTO :"schema".pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            trace_context, created_at, updated_at, concurrency_key, concurrency_limit,
            rate_key, rate_limit, rate_period, expires_at, payload_version, fair_key
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts, due,
            p_timeout_seconds, NULL, p_parent_id, p_schedule_id, '', '', p_trace_context,
            now(), now(), p_concurrency_key, p_concurrency_limit, p_rate_key, p_rate_limit,
            p_rate_period, deadline, p_payload_version, p_fair_key
        )
        RETURNING id INTO new_id;
    ELSE
        INSERT INTO :"schema".pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            trace_context, created_at, updated_at, concurrency_key, concurrency_limit,
            rate_key, rate_limit, rate_period, unique_until, unique_states, expires_at,
            payload_version, fair_key
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts, due,
            p_timeout_seconds, p_dedupe_key, p_parent_id, p_schedule_id, '', '',
            p_trace_context, now(), now(), p_concurrency_key, p_concurrency_limit,
            p_rate_key, p_rate_limit, p_rate_period,
            to_timestamp((floor(extract(epoch FROM now())::double precision / p_unique_for) + 1)
                         * p_unique_for),
            COALESCE(p_unique_states, 0), deadline, p_payload_version, p_fair_key
        )
        ON CONFLICT (job_type, dedupe_key, (COALESCE(unique_until, 'infinity'::timestamptz)), shelf)
            WHERE dedupe_key IS NOT NULL AND (status IN ('ready', 'blocked', 'running') OR (unique_states & CASE status WHEN 'done' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 4 ELSE 0 END) <> 0)
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

-- A batch finished: count the finish and enqueue its callbacks (each a prepared job in
-- pqjobs_batch.callbacks). Called with the batch row locked, by the functions here only.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_batch_finished(p_batch bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    b :"schema".pqjobs_batch%ROWTYPE;
    kind text;
    spec jsonb;
    queues text[] := '{}';
BEGIN
    UPDATE :"schema".pqjobs_batch SET finished_at = now(), finishes = finishes + 1
    WHERE id = p_batch RETURNING * INTO b;
    FOREACH kind IN ARRAY ARRAY['success', 'failure', 'finish'] LOOP
        CONTINUE WHEN kind = 'success' AND (b.failed > 0 OR b.cancelled > 0);
        CONTINUE WHEN kind = 'failure' AND b.failed = 0;
        spec := b.callbacks -> kind;
        CONTINUE WHEN spec IS NULL;
        INSERT INTO :"schema".pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, last_error, error_type, created_at, updated_at, callback_of_id,
            payload_version
        ) VALUES (
            spec ->> 'job_type', spec ->> 'queue', spec -> 'payload', 'ready',
            (spec ->> 'priority')::integer, 0, (spec ->> 'max_attempts')::integer, now(),
            (spec ->> 'timeout')::double precision, '', '', now(), now(), p_batch,
            (spec ->> 'payload_version')::smallint
        );
        queues := queues || (spec ->> 'queue');
    END LOOP;
    IF cardinality(queues) > 0 AND :"schema".pqjobs_anyone_listens() THEN
        PERFORM pg_notify('pqjobs', q) FROM (SELECT DISTINCT unnest(queues) AS q) u;
    END IF;
END
$$;

-- Callbacks stored since name their timeout as the job row does (timeout_seconds).
UPDATE :"schema".pqjobs_batch SET callbacks = (
    SELECT jsonb_object_agg(e.kind, CASE WHEN e.spec ? 'timeout_seconds'
        THEN (e.spec - 'timeout_seconds') || jsonb_build_object('timeout', e.spec -> 'timeout_seconds')
        ELSE e.spec END)
    FROM jsonb_each(callbacks) AS e(kind, spec))
WHERE callbacks::text LIKE '%timeout_seconds%';

DROP FUNCTION :"schema".pqjobs_enqueue(:"schema".pqjobs_job_spec);
DROP FUNCTION :"schema".pqjobs_job(jsonb);
DROP TYPE :"schema".pqjobs_job_spec;
