-- The claim (ready → running, and ready → blocked for jobs flow control holds back) and
-- the recording of successes (running → done), as PL/pgSQL functions whose plans are made
-- once per server session (invisible to PgBouncer in transaction mode).
--
-- A plan made once has to suit the table however it changes, and the statistics of a queue
-- table are often those of an empty one. So the plans are pinned: the claim walks the claim
-- index in order (bitmap and sequential scans off), and the rows it claims, and later the
-- rows their successes are recorded on, are updated where they lie, by TID (statements to
-- which no index applies). Index scans stay on: the triggers these statements fire run
-- under the same settings and need their indexes. A TID names a row within one partition
-- of pqjobs_job: every statement that finds rows by TID also says shelf = 'hot', which
-- keeps it to the hot partition (ready and running jobs are never anywhere else), as does
-- every other statement here: PostgreSQL then plans and locks the hot partition alone.
--
-- Both run with the caller's rights (SECURITY INVOKER): the worker role's grants on
-- pqjobs_job, pqjobs_key_slot, pqjobs_rate and pqjobs_pause.

-- Locks the next due jobs (FOR UPDATE SKIP LOCKED, in claim order; none past its deadline).
-- When none has a concurrency key or a rate key or is paused (the usual case), claims the
-- first p_limit of those. Otherwise runs the full claim, planned at each call: the one place
-- that decides who starts under flow control (pauses, rates, concurrency limits; jobs that
-- could not start anyway are held already when enqueued, flow.sql). Of the jobs it looked at, those
-- flow control holds move to blocked, and the first p_limit of those that may start are
-- claimed. p_scan looks further than p_limit: with p_limit 0, the worker moves held jobs
-- out of the head of the claim order without claiming any (after a claim met some). Each
-- row: the claimed job, its columns named as the job's fields (RETURNS TABLE below is the
-- one declaration of a claimed row, and the SELECT at the end the one place that fills it,
-- for both the usual claim and the full one: worker/claiming.py builds the Job by these
-- names; row_tid is where the row lies), then how many due jobs the claim moved to blocked
-- (a claim that held some and claimed none returns one row of NULLs but that count). The
-- claim commits without waiting for its WAL flush (at-least-once allows it).
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
    claimed tid[];  -- where the claimed rows lie now, in claim order
    held bigint := 0;  -- how many due jobs flow control moved to blocked
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
        EXECUTE $full$WITH picked AS (
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
            RETURNING j.ctid AS row_tid, go.ord AS claim_order
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
        SELECT (SELECT array_agg(row_tid ORDER BY claim_order) FROM claimed),
               (SELECT count(*) FROM held)$full$
            INTO claimed, held
            USING p_worker, p_limit, picked;
        IF claimed IS NULL THEN
            IF held > 0 THEN
                blocked_count := held;
                RETURN NEXT;  -- the one row of NULLs but the count
            END IF;
            RETURN;
        END IF;
    ELSIF p_limit < 1 THEN
        RETURN;  -- nothing flow control holds, and nothing to claim
    ELSE
        -- The usual claim. The picked rows are locked by this transaction, so they are
        -- still where the scan found them: claimed there, by a TID scan, the one plan left
        -- (no index applies to the statement, sequential scans are off). Planned once per
        -- session, it must not depend on the planner's statistics, which for a queue table
        -- are often those of an empty table: by primary key, the plan made then read a
        -- whole index once the table had grown. (Planner settings are left alone: triggers
        -- run under them too.)
        picked := picked[1:p_limit];
        WITH c AS (
            UPDATE :"schema".pqjobs_job AS j
            SET status = 'running', attempts = j.attempts + 1, locked_at = now(),
                locked_by = p_worker, heartbeat_at = now(), updated_at = now(), fair_turn = NULL
            WHERE j.shelf = 'hot' AND j.ctid = ANY(picked)
            RETURNING j.ctid AS row_tid, j.id AS job_id
        )
        -- in the order of the scan (fair turns among the rest)
        SELECT array_agg(c.row_tid ORDER BY u.pos) INTO claimed
        FROM c JOIN unnest(picked_ids) WITH ORDINALITY AS u(job_id, pos)
             ON u.job_id = c.job_id;
        IF claimed IS NULL THEN
            RETURN;
        END IF;
    END IF;
    -- The claimed rows, read where the claim left them (a TID scan: locked by this
    -- transaction, they cannot have moved since), in claim order: the one SELECT that fills
    -- a claimed row, for either claim.
    RETURN QUERY
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
               fair_key, j.ctid::text, held
        FROM :"schema".pqjobs_job AS j
        JOIN unnest(claimed) WITH ORDINALITY AS u(place, pos) ON j.ctid = u.place
        WHERE j.shelf = 'hot' AND j.ctid = ANY(claimed)
        ORDER BY u.pos;
END
$$;

-- running → done for one worker's attempts. p_done holds one array per attempt: [job id,
-- attempt, duration in ms, result, progress (each JSON text in a string, or null: none),
-- where its row lay when claimed (a tid as text, or null)]. Returns the ids written; an
-- attempt that is no longer this worker's is left as it is. The result and progress come as
-- JSON text inside a JSON string, so no value can change the shape of the document.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_complete(p_worker text, p_done jsonb)
RETURNS SETOF bigint
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
SET enable_bitmapscan = off
SET enable_seqscan = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    tids tid[];
    written bigint[];
    ids bigint[];
    -- A variable, not the literal, and the id compared with IS NOT DISTINCT FROM: no index
    -- applies to the statement below (neither the partial index of running jobs nor the
    -- primary key), so its one plan is a TID scan, whatever the planner's statistics say.
    -- Planner settings are left alone: the triggers a completion fires (a concurrency slot
    -- given back, the next blocked job released) run under them and need their indexes.
    running text := 'running';
BEGIN
    -- Most rows are still where their claim left them.
    SELECT array_agg((e ->> 5)::tid) INTO tids
    FROM jsonb_array_elements(p_done) AS e WHERE e ->> 5 IS NOT NULL;
    IF tids IS NOT NULL THEN
        WITH done AS (
            UPDATE :"schema".pqjobs_job AS j
            SET status = 'done', result = (t.e ->> 3)::jsonb, finished_at = now(),
                duration_ms = (t.e ->> 2)::bigint, heartbeat_at = NULL, updated_at = now(),
                progress = COALESCE((t.e ->> 4)::jsonb, j.progress),
                -- the attempt history keeps every error; a done job does not look failed
                last_error = '', error_type = ''
            FROM jsonb_array_elements(p_done) AS t(e)
            WHERE j.shelf = 'hot' AND j.ctid = ANY(tids) AND j.ctid = (t.e ->> 5)::tid
              AND j.id IS NOT DISTINCT FROM (t.e ->> 0)::bigint AND j.status = running
              AND j.locked_by = p_worker AND j.attempts = (t.e ->> 1)::integer
            RETURNING j.id
        )
        SELECT array_agg(id) INTO written FROM done;
        RETURN QUERY SELECT unnest(written);
    END IF;
    IF COALESCE(array_length(written, 1), 0) < jsonb_array_length(p_done) THEN
        -- The others by primary key: rows updated since their claim (a heartbeat, progress)
        -- lie elsewhere, and attempts may come without a place (atomic jobs). Planned for
        -- the ids at hand (EXECUTE).
        SELECT array_agg((e ->> 0)::bigint) INTO ids FROM jsonb_array_elements(p_done) AS e;
        RETURN QUERY EXECUTE $rest$
            UPDATE :"schema".pqjobs_job AS j
            SET status = 'done', result = (t.e ->> 3)::jsonb, finished_at = now(),
                duration_ms = (t.e ->> 2)::bigint, heartbeat_at = NULL, updated_at = now(),
                progress = COALESCE((t.e ->> 4)::jsonb, j.progress),
                -- the attempt history keeps every error; a done job does not look failed
                last_error = '', error_type = ''
            FROM jsonb_array_elements($1) AS t(e)
            WHERE j.shelf = 'hot' AND j.id = ANY($3) AND j.id = (t.e ->> 0)::bigint
              AND j.status = 'running'
              AND j.locked_by = $2 AND j.attempts = (t.e ->> 1)::integer
            RETURNING j.id
        $rest$ USING p_done, p_worker, ids;
    END IF;
END
$$;
