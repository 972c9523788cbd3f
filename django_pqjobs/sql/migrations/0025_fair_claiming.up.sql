-- Fair claiming (issue 29). Jobs carry a fair key and, while due and waiting, a fair turn
-- (pqjobs_fair_turn(), a trigger, gives it at enqueue; weights in pqjobs_fair_weight).
-- pqjobs_enqueue() takes p_fair_key (its argument list changes: dropped and created again,
-- the roles that could call it keeping that right); pqjobs_claim() takes fair jobs in turn
-- order beside the others by age, clears the turn of what it claims and returns the fair
-- key (its result type changes: dropped and created again, its callers keeping their right).
SELECT set_config('pqjobs.enqueue_callers', COALESCE((
    SELECT string_agg(DISTINCT a.grantee::regrole::text, ',')
    FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
    WHERE p.oid = ':"schema".pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz, double precision, double precision, text, bigint, bigint, text, jsonb, text, integer, text, integer, double precision, double precision, smallint, timestamptz, double precision, smallint)'::regprocedure
      AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
), ''), false);

DROP FUNCTION :"schema".pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz, double precision, double precision, text, bigint, bigint, text, jsonb, text, integer, text, integer, double precision, double precision, smallint, timestamptz, double precision, smallint);

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
    IF p_expires_at IS NOT NULL AND p_expires_in IS NOT NULL
       OR NOT (p_expires_in > 0 AND p_expires_in <= max_seconds)
       OR NOT p_expires_at BETWEEN '0001-01-02 00:00+00' AND '9999-12-30 00:00+00' THEN
        RAISE EXCEPTION 'pqjobs_enqueue: give expires_at or expires_in, not both (expires_in '
            'more than 0 seconds, at most 100 years; expires_at between the years 1 and '
            '9999), got % and %', quote_nullable(p_expires_at), quote_nullable(p_expires_in)
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
        ON CONFLICT (job_type, dedupe_key, (COALESCE(unique_until, 'infinity'::timestamptz)))
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

REVOKE ALL ON FUNCTION :"schema".pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz, double precision, double precision, text, bigint, bigint, text, jsonb, text, integer, text, integer, double precision, double precision, smallint, timestamptz, double precision, smallint, text) FROM PUBLIC;

DO $grant$
DECLARE
    caller text;
BEGIN
    FOREACH caller IN ARRAY string_to_array(current_setting('pqjobs.enqueue_callers'), ',') LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION :"schema".pqjobs_enqueue(%s) TO %s',
                       'text, text, jsonb, integer, integer, timestamptz, double precision, double precision, text, bigint, bigint, text, jsonb, text, integer, text, integer, double precision, double precision, smallint, timestamptz, double precision, smallint, text', caller);
    END LOOP;
END
$grant$;

RESET pqjobs.enqueue_callers;

SELECT set_config('pqjobs.claim_callers', COALESCE((
    SELECT string_agg(DISTINCT a.grantee::regrole::text, ',')
    FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
    WHERE p.oid = ':"schema".pqjobs_claim(text, integer, text[], integer, integer)'::regprocedure
      AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
), ''), false);

DROP FUNCTION :"schema".pqjobs_claim(text, integer, text[], integer, integer);

-- Locks the next due jobs (FOR UPDATE SKIP LOCKED, in claim order; none past its deadline). When none has a
-- concurrency key or a rate key and nothing is paused (the usual case), claims the first
-- p_limit of those. Otherwise runs the full claim, planned at each call: the one place that
-- decides flow control (pauses, rates, concurrency limits). Of the jobs it looked at, those
-- flow control holds move to blocked, and the first p_limit of those that may start are
-- claimed. p_scan looks further than p_limit: with p_limit 0, the worker moves held jobs
-- out of the head of the claim order without claiming any (after a claim met some). Each
-- row: the claimed job, its columns named as the job's fields (the one declaration of a
-- claimed row: worker/claiming.py builds the Job by these names; row_tid is where the row
-- lies), then how many due jobs the claim moved to blocked. The claim commits without
-- waiting for its WAL flush (at-least-once allows it).
CREATE OR REPLACE FUNCTION :"schema".pqjobs_claim(
    p_worker text,
    p_limit integer,
    p_queues text[] DEFAULT NULL,
    p_min_priority integer DEFAULT NULL,
    p_scan integer DEFAULT NULL
)
 RETURNS TABLE (
    id bigint,
    job_type varchar,
    queue varchar,
    payload text,
    priority integer,
    attempts integer,
    max_attempts integer,
    timeout_seconds double precision,
    dedupe_key varchar,
    parent_id bigint,
    schedule_id bigint,
    last_error text,
    error_type varchar,
    result text,
    duration_ms bigint,
    progress text,
    run_after double precision,
    locked_at double precision,
    created_at double precision,
    finished_at double precision,
    cancel_requested_at double precision,
    started_at double precision,
    concurrency_key varchar,
    concurrency_limit integer,
    rate_key varchar,
    rate_limit integer,
    rate_period double precision,
    trace_context text,
    retried_from integer,
    batch_id bigint,
    callback_of_id bigint,
    waiting_for integer,
    on_dependency_failure varchar,
    has_dependents boolean,
    waited_on boolean,
    unique_until double precision,
    unique_states smallint,
    expires_at double precision,
    sequence_key varchar,
    payload_version smallint,
    fair_key varchar,
    row_tid text,
    blocked_count bigint
)
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
-- The plan must walk pqjobs_job_claim in order and stop after LIMIT rows: planner
-- statistics of a queue table are often stale, and a bitmap scan plus a sort of every ready
-- row costs milliseconds per claim with 20,000 ready jobs, seconds with millions.
SET enable_bitmapscan = off
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    -- no floor: the lowest integer, so the scan is bounded by the index's first column alike
    p_floor integer := COALESCE(p_min_priority, -2147483648);
    p_look integer := greatest(COALESCE(p_scan, 0), p_limit);
    picked tid[];
    picked_ids bigint[];
    flow boolean;
BEGIN
    -- At-least-once allows it: a claim lost in a server crash leaves its jobs ready to
    -- run again; each job itself was committed durably when it was enqueued.
    PERFORM set_config('synchronous_commit', 'off', true);
    -- Two lines merged: jobs by age (pqjobs_job_claim), and jobs with a fair turn in turn
    -- order (pqjobs_job_fair_claim, fairness.sql). Among the jobs of a priority, the fair
    -- line takes its place by the age of the oldest job found in it, and keeps its turn
    -- order within (rank: the turn; 0 for jobs by age).
    WITH fair AS (
        SELECT ctid, id, priority, run_after, fair_turn, concurrency_key, rate_key
        FROM :"schema".pqjobs_job
        WHERE status = 'ready' AND fair_turn IS NOT NULL AND run_after <= now()
          AND (p_queues IS NULL OR queue = ANY(p_queues)) AND priority >= p_floor
          AND (expires_at IS NULL OR expires_at > now())
        ORDER BY priority DESC, fair_turn, id
        LIMIT p_look
        FOR UPDATE SKIP LOCKED
    ), fair_placed AS (
        SELECT f.ctid, f.id, f.priority, m.place, f.fair_turn AS rank, f.concurrency_key,
               f.rate_key
        FROM fair f
        JOIN (SELECT priority, min(run_after) AS place FROM fair GROUP BY priority) m
          ON m.priority = f.priority
    ), by_age AS (
        SELECT ctid, id, priority, run_after AS place, 0::float8 AS rank, concurrency_key,
               rate_key
        FROM :"schema".pqjobs_job
        WHERE status = 'ready' AND fair_turn IS NULL AND run_after <= now()
          AND (p_queues IS NULL OR queue = ANY(p_queues)) AND priority >= p_floor
          -- past its deadline: left for the sweep to end as expired, never started
          AND (expires_at IS NULL OR expires_at > now())
        ORDER BY priority DESC, run_after, id
        LIMIT p_look
        FOR UPDATE SKIP LOCKED
    )
    SELECT array_agg(p.ctid ORDER BY p.priority DESC, p.place, p.rank, p.id),
           array_agg(p.id ORDER BY p.priority DESC, p.place, p.rank, p.id),
           bool_or(p.concurrency_key IS NOT NULL OR p.rate_key IS NOT NULL)
    INTO picked, picked_ids, flow
    FROM (
        SELECT ctid, id, priority, place, rank, concurrency_key, rate_key FROM by_age
        UNION ALL
        SELECT ctid, id, priority, place, rank, concurrency_key, rate_key FROM fair_placed
    ) p;
    IF picked IS NULL THEN
        RETURN;
    END IF;
    IF flow OR EXISTS (SELECT 1 FROM :"schema".pqjobs_pause) THEN
        -- The rows the scan above locked, where it found them (a TID scan: locked by this
        -- transaction, they cannot have moved).
        RETURN QUERY EXECUTE $full$WITH picked AS (
            SELECT j.id, j.queue, j.job_type, j.priority, j.run_after, j.concurrency_key,
                   j.concurrency_limit, j.rate_key, u.pos
            FROM unnest($3) WITH ORDINALITY AS u(place, pos)
            JOIN :"schema".pqjobs_job j ON j.ctid = u.place
        ), numbered AS (
            -- in the order the scan above put them (fair turns among the rest)
            SELECT p.*, row_number() OVER (ORDER BY p.pos) AS ord,
                   EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                           WHERE z.kind = 'queue' AND z.name = p.queue)
                   OR EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                              WHERE z.kind = 'job_type' AND z.name = p.job_type) AS paused
            FROM picked p
        ), rate_room AS (
            -- Claims never wait for each other: a bucket another claim holds right now is
            -- left for the next claim (its jobs stay ready), so claimers cannot deadlock.
            -- Locked, a bucket reads as it is now. Starts per fixed window: a new window
            -- starts the count again.
            SELECT b.key, b.this_window,
                   greatest(b.allowance - CASE WHEN b.window_start = b.this_window
                                               THEN b.used ELSE 0 END, 0) AS room
            FROM (
                SELECT r.key, r.allowance, r.used, r.window_start,
                       to_timestamp(floor(extract(epoch FROM now())::float8 / r.period)
                                    * r.period) AS this_window
                FROM :"schema".pqjobs_rate r
                WHERE r.key IN (SELECT rate_key FROM numbered WHERE NOT paused)
                FOR UPDATE SKIP LOCKED
            ) b
        ), rate_ranked AS (
            SELECT n.*, row_number() OVER (PARTITION BY n.rate_key ORDER BY n.ord) AS rate_rank,
                   (n.rate_key IS NOT NULL
                    AND n.rate_key NOT IN (SELECT key FROM rate_room)) AS rate_busy
            FROM numbered n WHERE NOT n.paused
        ), rate_passed AS (
            SELECT r.* FROM rate_ranked r
            WHERE NOT r.rate_busy
              AND (r.rate_key IS NULL
                   OR r.rate_rank <= (SELECT m.room FROM rate_room m WHERE m.key = r.rate_key))
        ), key_room AS (
            -- A slot is taken only while fewer than the limit run; the trigger
            -- pqjobs_job_left_running gives slots back.
            SELECT s.key, greatest(s.running, 0) AS running FROM :"schema".pqjobs_key_slot s
            WHERE s.key IN (SELECT concurrency_key FROM rate_passed)
            FOR UPDATE SKIP LOCKED
        ), key_ranked AS (
            SELECT r.*,
                   row_number() OVER (PARTITION BY r.concurrency_key ORDER BY r.ord) AS key_rank,
                   (r.concurrency_key IS NOT NULL
                    AND r.concurrency_key NOT IN (SELECT key FROM key_room)) AS key_busy
            FROM rate_passed r
        ), passing AS (
            SELECT k.* FROM key_ranked k
            WHERE NOT k.key_busy
              AND (k.concurrency_key IS NULL
                   OR k.key_rank <= k.concurrency_limit - (SELECT m.running FROM key_room m
                                                           WHERE m.key = k.concurrency_key))
        ), go AS (
            -- the first p_limit in claim order; jobs that may start beyond it stay ready
            SELECT id, rate_key, concurrency_key, ord FROM passing ORDER BY ord LIMIT $2
        ), rate_taken AS (
            UPDATE :"schema".pqjobs_rate AS r
            SET used = CASE WHEN r.window_start = m.this_window THEN r.used ELSE 0 END + g.n,
                window_start = m.this_window
            FROM (SELECT rate_key, count(*) AS n FROM go WHERE rate_key IS NOT NULL
                  GROUP BY rate_key) g
            JOIN rate_room m ON m.key = g.rate_key
            WHERE r.key = g.rate_key
            RETURNING r.key
        ), key_taken AS (
            UPDATE :"schema".pqjobs_key_slot AS s
            SET running = s.running + g.n
            FROM (SELECT concurrency_key, count(*) AS n FROM go
                  WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key) g
            WHERE s.key = g.concurrency_key
            RETURNING s.key
        ), busy AS (
            SELECT id FROM rate_ranked WHERE rate_busy
            UNION ALL
            SELECT id FROM key_ranked WHERE key_busy
        ), claimed AS (
            UPDATE :"schema".pqjobs_job AS j
            SET status = 'running', attempts = j.attempts + 1, locked_at = now(),
                locked_by = $1, heartbeat_at = now(), updated_at = now(), fair_turn = NULL
            FROM go
            WHERE j.id = go.id
            RETURNING j.*, j.ctid AS row_tid, go.ord AS claim_order
        ), held AS (
            -- Jobs that may not start now leave the claim order (and its index) until what holds
            -- them clears, so no later claim walks over them again.
            UPDATE :"schema".pqjobs_job AS j
            SET status = 'blocked', updated_at = now(),
                blocked_by = CASE
                    WHEN n.paused THEN 'paused'
                    WHEN n.id IN (SELECT id FROM rate_passed) THEN 'limit'
                    ELSE 'rate' END
            FROM numbered n
            WHERE j.id = n.id AND n.id NOT IN (SELECT id FROM passing)
              AND n.id NOT IN (SELECT id FROM busy)
            RETURNING j.id
        )
        SELECT id, job_type, queue, payload::text, priority, attempts, max_attempts,
               timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
               result::text, duration_ms, progress::text,
               extract(epoch FROM run_after)::float8, extract(epoch FROM locked_at)::float8,
               extract(epoch FROM created_at)::float8, extract(epoch FROM finished_at)::float8,
               extract(epoch FROM cancel_requested_at)::float8,
               extract(epoch FROM started_at)::float8, concurrency_key, concurrency_limit,
               rate_key, rate_limit, rate_period, trace_context::text, retried_from, batch_id,
               callback_of_id, waiting_for, on_dependency_failure, has_dependents, waited_on,
               extract(epoch FROM unique_until)::float8, unique_states,
               extract(epoch FROM expires_at)::float8, sequence_key, payload_version,
               fair_key, row_tid::text, held.n
        FROM (SELECT count(*) AS n FROM held) AS held LEFT JOIN claimed ON true
        ORDER BY claim_order$full$
            USING p_worker, p_limit, picked;
        RETURN;
    END IF;
    IF p_limit < 1 THEN
        RETURN;  -- nothing flow control holds, and nothing to claim
    END IF;
    -- The usual claim. The picked rows are locked by this transaction, so they are still
    -- where the scan found them: claimed there, by a TID scan, the one plan left (no index
    -- applies to the statement, sequential scans are off). Planned once per session, it must
    -- not depend on the planner's statistics, which for a queue table are often those of an
    -- empty table: by primary key, the plan made then read a whole index once the table had
    -- grown. (Planner settings are left alone: triggers run under them too.)
    picked := picked[1:p_limit];
    RETURN QUERY
        WITH claimed AS (
            UPDATE :"schema".pqjobs_job AS j
            SET status = 'running', attempts = j.attempts + 1, locked_at = now(),
                locked_by = p_worker, heartbeat_at = now(), updated_at = now(), fair_turn = NULL
            WHERE j.ctid = ANY(picked)
            RETURNING j.*, j.ctid AS row_tid
        )
        SELECT id, job_type, queue, payload::text, priority, attempts, max_attempts,
               timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
               result::text, duration_ms, progress::text,
               extract(epoch FROM run_after)::float8, extract(epoch FROM locked_at)::float8,
               extract(epoch FROM created_at)::float8, extract(epoch FROM finished_at)::float8,
               extract(epoch FROM cancel_requested_at)::float8,
               extract(epoch FROM started_at)::float8, concurrency_key, concurrency_limit,
               rate_key, rate_limit, rate_period, trace_context::text, retried_from, batch_id,
               callback_of_id, waiting_for, on_dependency_failure, has_dependents, waited_on,
               extract(epoch FROM unique_until)::float8, unique_states,
               extract(epoch FROM expires_at)::float8, sequence_key, payload_version,
               fair_key, row_tid::text, 0::bigint
        -- in the order of the scan (fair turns among the rest)
        FROM claimed JOIN unnest(picked_ids) WITH ORDINALITY AS u(job_id, pos)
             ON u.job_id = claimed.id
        ORDER BY u.pos;
END
$$;

REVOKE ALL ON FUNCTION :"schema".pqjobs_claim(text, integer, text[], integer, integer) FROM PUBLIC;

DO $grant$
DECLARE
    caller text;
BEGIN
    FOREACH caller IN ARRAY string_to_array(current_setting('pqjobs.claim_callers'), ',') LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION :"schema".pqjobs_claim(%s) TO %s',
                       'text, integer, text[], integer, integer', caller);
    END LOOP;
END
$grant$;

RESET pqjobs.claim_callers;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_fair_turn() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Its plans are made once per session, often while the table's statistics are those of an
-- empty one, and then serve inserts of 100,000 rows in one statement: pinned to the two
-- indexes (a plan that read the table would make such an insert quadratic).
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    last_turn double precision;
    head double precision;
    key_weight integer;
BEGIN
    SELECT j.fair_turn INTO last_turn FROM :"schema".pqjobs_job j
    WHERE j.status = 'ready' AND j.fair_turn IS NOT NULL
      AND j.fair_key = NEW.fair_key AND j.priority = NEW.priority
    ORDER BY j.fair_key DESC, j.priority DESC, j.fair_turn DESC
    LIMIT 1;
    SELECT j.fair_turn INTO head FROM :"schema".pqjobs_job j
    WHERE j.status = 'ready' AND j.fair_turn IS NOT NULL AND j.priority = NEW.priority
    ORDER BY j.priority DESC, j.fair_turn
    LIMIT 1;
    SELECT w.weight INTO key_weight FROM :"schema".pqjobs_fair_weight w
    WHERE w.key = NEW.fair_key;
    NEW.fair_turn := greatest(last_turn, head, 0) + 1.0 / COALESCE(key_weight, 1);
    RETURN NEW;
END
$$;

DROP TRIGGER IF EXISTS pqjobs_job_fair_turn ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_fair_turn
    BEFORE INSERT ON :"schema".pqjobs_job
    FOR EACH ROW
    WHEN (NEW.fair_key IS NOT NULL AND NEW.fair_turn IS NULL AND NEW.status = 'ready'
          AND NEW.run_after <= now())
    EXECUTE FUNCTION :"schema".pqjobs_fair_turn();

REVOKE ALL ON FUNCTION :"schema".pqjobs_fair_turn() FROM PUBLIC;
