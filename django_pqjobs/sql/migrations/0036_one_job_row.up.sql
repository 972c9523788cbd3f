-- One job row (issue 41, item 1): the job an enqueue inserts is declared once, as the type
-- pqjobs_job_spec, and pqjobs_enqueue(pqjobs_job_spec) is the one INSERT of a new job
-- (enqueue_job sends its spec as JSON in one argument, in place of four statement variants
-- of up to 24 arguments). SQL callers write the spec as JSON through pqjobs_job(jsonb),
-- which refuses a field the type does not have. The positional pqjobs_enqueue(...) stays,
-- deprecated, as a wrapper of the new one. A finished batch's callbacks go in through it too.

-- The job row an enqueue inserts, declared once: every insert of a new job goes through
-- pqjobs_enqueue(pqjobs_job_spec) (enqueue_job, batch callbacks, SQL callers). Its fields
-- are the job's insertable columns, named as the columns are (but run_at and delay_seconds,
-- which make run_after; expires_in, which makes expires_at with it; unique_for, which makes
-- unique_until; notify_channel, the channel to wake workers on). specification.py names the
-- field each option goes in through (Option.sql); tests/integration/test_option_set.py
-- checks the two against each other. A field left NULL takes its column's default (queue
-- 'default', payload {}, priority 0, max_attempts 5, unique_states 0; delay_seconds 0).
DO $$
BEGIN
    CREATE TYPE :"schema".pqjobs_job_spec AS (
        job_type text,
        queue text,
        payload jsonb,
        priority integer,
        max_attempts integer,
        run_at timestamptz,
        delay_seconds double precision,
        timeout_seconds double precision,
        dedupe_key text,
        parent_id bigint,
        schedule_id bigint,
        notify_channel text,
        trace_context jsonb,
        concurrency_key text,
        concurrency_limit integer,
        rate_key text,
        rate_limit integer,
        rate_period double precision,
        unique_for double precision,
        unique_states smallint,
        expires_at timestamptz,
        expires_in double precision,
        payload_version smallint,
        fair_key text,
        callback_of_id bigint
    );
EXCEPTION WHEN duplicate_object THEN NULL;
END
$$;

-- A job spec from JSON, for SQL callers: the keys are the fields' names; a key that is not
-- one is refused (jsonb_populate_record alone would drop it unseen).
--   SELECT pqjobs_enqueue(pqjobs_job('{"job_type": "cleanup", "queue": "default",
--                                      "max_attempts": 5, "payload": {"days": 30}}'));
CREATE OR REPLACE FUNCTION :"schema".pqjobs_job(p_spec jsonb) RETURNS :"schema".pqjobs_job_spec
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    spec :"schema".pqjobs_job_spec;
    unknown text;
BEGIN
    IF jsonb_typeof(p_spec) IS DISTINCT FROM 'object' THEN
        -- (its type, never its text: the value may hold a payload's secrets)
        RAISE EXCEPTION 'pqjobs_job: a job spec is a JSON object, got %',
            COALESCE('a JSON ' || jsonb_typeof(p_spec), 'NULL')
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    spec := jsonb_populate_record(NULL:::"schema".pqjobs_job_spec, p_spec);
    SELECT string_agg(quote_literal(k), ', ' ORDER BY k) INTO unknown
    FROM jsonb_object_keys(p_spec) AS k
    WHERE NOT to_jsonb(spec) ? k;
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'pqjobs_job: unknown field(s) %; a job spec has the fields of its '
            'type (docs/guides/enqueueing.md)', unknown
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN spec;
END
$$;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_enqueue(p_job :"schema".pqjobs_job_spec) RETURNS bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    j ALIAS FOR p_job;
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
    -- A field left NULL takes the column's default (a delay: none).
    j.queue := COALESCE(j.queue, 'default');
    j.payload := COALESCE(j.payload, '{}');
    j.priority := COALESCE(j.priority, 0);
    j.max_attempts := COALESCE(j.max_attempts, 5);
    j.delay_seconds := COALESCE(j.delay_seconds, 0);
    IF j.job_type IS NULL OR btrim(j.job_type) = '' OR j.job_type ~ control THEN
        RAISE EXCEPTION 'pqjobs_enqueue: job_type must be non-empty text without control '
            'characters, got %', quote_nullable(left(j.job_type, 120))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.queue IS NULL OR btrim(j.queue) = '' OR j.queue ~ control THEN
        RAISE EXCEPTION 'pqjobs_enqueue: queue must be non-empty text without control '
            'characters, got %', quote_nullable(left(j.queue, 120))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.max_attempts IS NULL OR j.max_attempts < 1 THEN
        RAISE EXCEPTION 'pqjobs_enqueue: max_attempts must be at least 1, got %',
            quote_nullable(j.max_attempts)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.run_at IS NOT NULL
       AND NOT j.run_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00' THEN
        RAISE EXCEPTION 'pqjobs_enqueue: run_after must be between the years 1 and 9999, '
            'got %', j.run_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.delay_seconds IS NULL OR NOT (j.delay_seconds >= 0 AND j.delay_seconds <= max_seconds)
    THEN
        RAISE EXCEPTION 'pqjobs_enqueue: delay must be 0 or more seconds, at most 100 years, '
            'got %', quote_nullable(j.delay_seconds)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.timeout_seconds IS NOT NULL
       AND NOT (j.timeout_seconds > 0 AND j.timeout_seconds <= max_seconds) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: timeout must be more than 0 seconds, at most 100 '
            'years, got %', j.timeout_seconds
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.expires_at IS NOT NULL AND j.expires_in IS NOT NULL THEN
        RAISE EXCEPTION 'pqjobs_enqueue: give expires_at or expires_in, not both, got % and %',
            j.expires_at, j.expires_in
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (j.expires_in > 0 AND j.expires_in <= max_seconds) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: expires_in must be more than 0 seconds, at most 100 '
            'years, got %', j.expires_in
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT j.expires_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00' THEN
        RAISE EXCEPTION 'pqjobs_enqueue: expires_at must be between the years 1 and 9999, '
            'got %', j.expires_at
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    due := COALESCE(j.run_at, now()) + make_interval(secs => j.delay_seconds);
    deadline := COALESCE(j.expires_at, due + make_interval(secs => j.expires_in));
    IF deadline <= due THEN
        RAISE EXCEPTION 'pqjobs_enqueue: the deadline % is not after the job is due (%): it '
            'could never start', deadline, due
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.dedupe_key = '' THEN
        RAISE EXCEPTION 'pqjobs_enqueue: dedupe_key must be NULL or non-empty text'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF NOT (j.unique_for > 0 AND j.unique_for <= max_seconds)
       OR NOT (j.unique_states BETWEEN 0 AND 7) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: unique_for must be more than 0 seconds, at most 100 '
            'years, and unique_states a mask from 0 to 7 (1 done, 2 failed, 4 cancelled), '
            'got % and %', j.unique_for, j.unique_states
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.dedupe_key IS NULL AND (j.unique_for IS NOT NULL OR j.unique_states <> 0) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: unique_for and unique_states need a dedupe_key'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (j.concurrency_key IS NULL) <> (j.concurrency_limit IS NULL)
       OR j.concurrency_limit < 1 OR j.concurrency_key = '' OR j.concurrency_key ~ control THEN
        RAISE EXCEPTION 'pqjobs_enqueue: concurrency_key needs a limit (both or neither; the '
            'limit at least 1, the key non-empty without control characters), got % and %',
            quote_nullable(left(j.concurrency_key, 120)), quote_nullable(j.concurrency_limit)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (j.rate_key IS NULL) <> (j.rate_limit IS NULL)
       OR (j.rate_key IS NULL) <> (j.rate_period IS NULL) OR j.rate_limit < 1
       OR NOT (j.rate_period >= 0.001 AND j.rate_period <= max_seconds)
       OR j.rate_key = '' OR j.rate_key ~ control THEN
        RAISE EXCEPTION 'pqjobs_enqueue: rate_key needs a rate (key, limit and period, or '
            'none; the limit at least 1, the period between 1 ms and 100 years), got %, % and %',
            quote_nullable(left(j.rate_key, 120)), quote_nullable(j.rate_limit),
            quote_nullable(j.rate_period)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.fair_key = '' OR j.fair_key ~ control OR length(j.fair_key) > 255 THEN
        RAISE EXCEPTION 'pqjobs_enqueue: fair_key must be NULL or non-empty text of at most '
            '255 characters without control characters, got %',
            quote_nullable(left(j.fair_key, 120))
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF j.payload_version < 1 THEN
        RAISE EXCEPTION 'pqjobs_enqueue: payload_version must be 1 or more, got %',
            j.payload_version
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT true, t.fields INTO is_protected, protected_fields
    FROM :"schema".pqjobs_protected_type t WHERE t.job_type = j.job_type;
    IF is_protected AND (
        CASE WHEN jsonb_typeof(protected_fields) = 'array' THEN
            -- encrypted by field: each named field the payload has must be an envelope
            jsonb_typeof(j.payload) IS DISTINCT FROM 'object' OR EXISTS (
                SELECT 1 FROM jsonb_array_elements_text(protected_fields) AS f(name)
                WHERE j.payload ? f.name
                  AND (jsonb_typeof(j.payload -> f.name -> 'pqjobs_encrypted')
                           IS DISTINCT FROM 'string'
                       OR j.payload -> f.name <> jsonb_build_object(
                              'pqjobs_encrypted', j.payload -> f.name -> 'pqjobs_encrypted')))
        ELSE
            jsonb_typeof(j.payload -> 'pqjobs_encrypted') IS DISTINCT FROM 'string'
            OR j.payload <> jsonb_build_object('pqjobs_encrypted', j.payload -> 'pqjobs_encrypted')
        END) THEN
        RAISE EXCEPTION 'pqjobs_enqueue: job type % is encrypted at rest (%): its payload must '
            'be sealed with the keys of PQJOBS[''ENCRYPTION_KEYS''], which SQL cannot do; '
            'enqueue it from Python', quote_literal(j.job_type),
            CASE WHEN jsonb_typeof(protected_fields) = 'array'
                 THEN 'the fields ' || protected_fields::text ELSE 'the whole payload' END
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- Two INSERTs on purpose: ON CONFLICT cannot be made conditional without dynamic SQL,
    -- which would lose the cached plan, and an INSERT with it writes its row speculatively
    -- (a second WAL record). Without a key no conflict is possible.
    IF j.dedupe_key IS NULL THEN
        INSERT INTO :"schema".pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            trace_context, created_at, updated_at, concurrency_key, concurrency_limit,
            rate_key, rate_limit, rate_period, unique_until, unique_states, expires_at,
            payload_version, fair_key, callback_of_id
        ) VALUES (
            j.job_type, j.queue, j.payload, 'ready', j.priority, 0, j.max_attempts, due,
            j.timeout_seconds, j.dedupe_key, j.parent_id, j.schedule_id, '', '',
            j.trace_context, now(), now(), j.concurrency_key, j.concurrency_limit,
            j.rate_key, j.rate_limit, j.rate_period,
            to_timestamp((floor(extract(epoch FROM now())::double precision / j.unique_for) + 1)
                         * j.unique_for),
            COALESCE(j.unique_states, 0), deadline, j.payload_version, j.fair_key,
            j.callback_of_id
        )
        RETURNING id INTO new_id;
    ELSE
        INSERT INTO :"schema".pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            trace_context, created_at, updated_at, concurrency_key, concurrency_limit,
            rate_key, rate_limit, rate_period, unique_until, unique_states, expires_at,
            payload_version, fair_key, callback_of_id
        ) VALUES (
            j.job_type, j.queue, j.payload, 'ready', j.priority, 0, j.max_attempts, due,
            j.timeout_seconds, j.dedupe_key, j.parent_id, j.schedule_id, '', '',
            j.trace_context, now(), now(), j.concurrency_key, j.concurrency_limit,
            j.rate_key, j.rate_limit, j.rate_period,
            to_timestamp((floor(extract(epoch FROM now())::double precision / j.unique_for) + 1)
                         * j.unique_for),
            COALESCE(j.unique_states, 0), deadline, j.payload_version, j.fair_key,
            j.callback_of_id
        )
        ON CONFLICT (job_type, dedupe_key, (COALESCE(unique_until, 'infinity'::timestamptz)), shelf)
            WHERE dedupe_key IS NOT NULL AND (status IN ('ready', 'blocked', 'running') OR (unique_states & CASE status WHEN 'done' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 4 ELSE 0 END) <> 0)
            DO NOTHING
        RETURNING id INTO new_id;
    END IF;
    IF new_id IS NOT NULL AND j.notify_channel IS NOT NULL
       AND :"schema".pqjobs_anyone_listens() THEN
        PERFORM pg_notify(j.notify_channel, j.queue);
    END IF;
    RETURN new_id;
END
$$;


-- The positional form of releases before migration 0036, kept for SQL callers written
-- against it (deprecated: it goes in 2.0). It makes the spec and calls the one above.
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
BEGIN
    IF p_priority IS NULL OR p_delay_seconds IS NULL THEN
        RAISE EXCEPTION 'pqjobs_enqueue: priority must be a whole number and delay 0 or '
            'more seconds, got % and %', quote_nullable(p_priority),
            quote_nullable(p_delay_seconds)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    RETURN :"schema".pqjobs_enqueue(ROW(
        p_job_type, p_queue, p_payload, p_priority, p_max_attempts, p_run_at, p_delay_seconds,
        p_timeout_seconds, p_dedupe_key, p_parent_id, p_schedule_id, p_notify_channel,
        p_trace_context, p_concurrency_key, p_concurrency_limit, p_rate_key, p_rate_limit,
        p_rate_period, p_unique_for, p_unique_states, p_expires_at, p_expires_in,
        p_payload_version, p_fair_key, NULL
    ):::"schema".pqjobs_job_spec);
END
$$;

-- A batch finished: count the finish and enqueue its callbacks (each a job row in
-- pqjobs_batch.callbacks, enqueued through pqjobs_enqueue, sql/schema/enqueue.sql). Called
-- with the batch row locked, by the functions here only.
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
        -- The callback is a job row (pqjobs_job_spec) batch() stored; one stored before
        -- migration 0036 names its timeout "timeout".
        IF spec ? 'timeout' THEN
            spec := (spec - 'timeout') || jsonb_build_object('timeout_seconds', spec -> 'timeout');
        END IF;
        PERFORM :"schema".pqjobs_enqueue(jsonb_populate_record(NULL:::"schema".pqjobs_job_spec,
            spec || jsonb_build_object('callback_of_id', p_batch)));
        queues := queues || (spec ->> 'queue');
    END LOOP;
    IF cardinality(queues) > 0 AND :"schema".pqjobs_anyone_listens() THEN
        PERFORM pg_notify('pqjobs', q) FROM (SELECT DISTINCT unnest(queues) AS q) u;
    END IF;
END
$$;

REVOKE ALL ON FUNCTION :"schema".pqjobs_enqueue(:"schema".pqjobs_job_spec) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_job(jsonb) FROM PUBLIC;

-- The roles that may call the positional form may call the new one (which it calls) and
-- pqjobs_job: the grants a deployment made go on working.
DO $$
DECLARE
    grantee text;
BEGIN
    FOR grantee IN
        SELECT DISTINCT quote_ident(r.rolname)
        FROM pg_proc p
        CROSS JOIN LATERAL aclexplode(p.proacl) AS a
        JOIN pg_roles r ON r.oid = a.grantee
        WHERE p.oid = ':"schema".pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz,
                  double precision, double precision, text, bigint, bigint, text, jsonb, text,
                  integer, text, integer, double precision, double precision, smallint,
                  timestamptz, double precision, smallint, text)'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND r.rolname <> current_user
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION :"schema".pqjobs_enqueue(:"schema".pqjobs_job_spec), '
                       ':"schema".pqjobs_job(jsonb) TO %s', grantee);
    END LOOP;
END
$$;
