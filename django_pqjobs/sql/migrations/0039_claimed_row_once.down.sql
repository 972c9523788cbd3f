-- Back to the claim of migration 0027: each of pqjobs_claim()'s two paths returns its
-- claimed rows itself, with its own copy of the columns.

-- Locks the next due jobs (FOR UPDATE SKIP LOCKED, in claim order; none past its deadline).
-- When none has a concurrency key or a rate key or is paused (the usual case), claims the
-- first p_limit of those. Otherwise runs the full claim, planned at each call: the one place
-- that decides who starts under flow control (pauses, rates, concurrency limits; jobs that
-- could not start anyway are held already when enqueued, flow.sql). Of the jobs it looked at, those
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
        WHERE shelf = 'hot' AND status = 'ready' AND fair_turn IS NOT NULL AND run_after <= now()
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
        WHERE shelf = 'hot' AND status = 'ready' AND fair_turn IS NULL AND run_after <= now()
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
    -- Jobs of a paused queue or type are held when enqueued or paused (flow.sql,
    -- transitions/flow.py); one enqueued while its pause was being committed may still be
    -- ready: the full claim holds it.
    IF flow OR (EXISTS (SELECT 1 FROM :"schema".pqjobs_pause)
                AND EXISTS (SELECT 1 FROM :"schema".pqjobs_job j
                            JOIN :"schema".pqjobs_pause z
                              ON (z.kind = 'queue' AND z.name = j.queue)
                              OR (z.kind = 'job_type' AND z.name = j.job_type)
                            WHERE j.shelf = 'hot' AND j.ctid = ANY(picked))) THEN
        -- The rows the scan above locked, where it found them (a TID scan: locked by this
        -- transaction, they cannot have moved).
        RETURN QUERY EXECUTE $full$WITH picked AS (
            SELECT j.id, j.queue, j.job_type, j.priority, j.run_after, j.concurrency_key,
                   j.concurrency_limit, j.rate_key, u.pos
            FROM unnest($3) WITH ORDINALITY AS u(place, pos)
            JOIN :"schema".pqjobs_job j ON j.shelf = 'hot' AND j.ctid = u.place
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
            WHERE j.shelf = 'hot' AND j.id = go.id
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
            WHERE j.shelf = 'hot' AND j.id = n.id AND n.id NOT IN (SELECT id FROM passing)
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
            WHERE j.shelf = 'hot' AND j.ctid = ANY(picked)
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
