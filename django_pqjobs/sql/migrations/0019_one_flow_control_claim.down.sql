-- Back to pqjobs_claim() as migration 0016 left it (four arguments).
-- The argument list changes, so the function is dropped and created again: the roles that
-- could call it (granted by the deployment, see docs/guides/reliability.md) keep that right.
SELECT set_config('pqjobs.claim_callers', COALESCE((
    SELECT string_agg(DISTINCT a.grantee::regrole::text, ',')
    FROM pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
    WHERE p.oid = ':"schema".pqjobs_claim(text, integer, text[], integer, integer)'::regprocedure
      AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
), ''), false);

DROP FUNCTION :"schema".pqjobs_claim(text, integer, text[], integer, integer);

CREATE OR REPLACE FUNCTION :"schema".pqjobs_claim(
    p_worker text,
    p_limit integer,
    p_queues text[] DEFAULT NULL,
    p_min_priority integer DEFAULT NULL
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
    picked tid[];
    flow boolean;
BEGIN
    -- At-least-once allows it: a claim lost in a server crash leaves its jobs ready to
    -- run again; each job itself was committed durably when it was enqueued.
    PERFORM set_config('synchronous_commit', 'off', true);
    SELECT array_agg(p.ctid ORDER BY p.priority DESC, p.run_after, p.id),
           bool_or(p.concurrency_key IS NOT NULL OR p.rate_key IS NOT NULL)
    INTO picked, flow
    FROM (
        SELECT ctid, id, priority, run_after, concurrency_key, rate_key
        FROM :"schema".pqjobs_job
        WHERE status = 'ready' AND run_after <= now()
          AND (p_queues IS NULL OR queue = ANY(p_queues)) AND priority >= p_floor
        ORDER BY priority DESC, run_after, id
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ) p;
    IF picked IS NULL THEN
        RETURN;
    END IF;
    IF flow OR EXISTS (SELECT 1 FROM :"schema".pqjobs_pause) THEN
        RETURN QUERY EXECUTE $full$WITH picked AS (
            SELECT id, queue, job_type, priority, run_after, concurrency_key, concurrency_limit,
                   rate_key
            FROM :"schema".pqjobs_job
            WHERE status = 'ready' AND run_after <= now()
              AND ($3::text[] IS NULL OR queue = ANY($3)) AND priority >= $4
            ORDER BY priority DESC, run_after, id
            LIMIT $2
            FOR UPDATE SKIP LOCKED
        ), numbered AS (
            SELECT p.*, row_number() OVER (ORDER BY p.priority DESC, p.run_after, p.id) AS ord,
                   EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                           WHERE z.kind = 'queue' AND z.name = p.queue)
                   OR EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                              WHERE z.kind = 'job_type' AND z.name = p.job_type) AS paused
            FROM picked p
        ), rate_wanted AS (
            SELECT rate_key, count(*) AS wanted FROM numbered
            WHERE rate_key IS NOT NULL AND NOT paused
            GROUP BY rate_key
        ), rate_locked AS (
            -- Claims never wait for each other: a bucket another claim holds right now is left
            -- for the next claim (its jobs stay ready), so claimers cannot deadlock.
            SELECT r.key FROM :"schema".pqjobs_rate r
            WHERE r.key IN (SELECT rate_key FROM rate_wanted)
            FOR UPDATE SKIP LOCKED
        ), rate_grant AS (
            -- Starts per fixed window: a new window starts the count again.
            UPDATE :"schema".pqjobs_rate AS r
            SET last_grant = least(w.wanted, greatest(r.allowance - CASE
                    WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                             / r.period) * r.period)
                    THEN r.used ELSE 0 END, 0)),
                used = CASE
                    WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                             / r.period) * r.period)
                    THEN r.used ELSE 0 END
                    + least(w.wanted, greatest(r.allowance - CASE
                        WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                                 / r.period) * r.period)
                        THEN r.used ELSE 0 END, 0)),
                window_start = to_timestamp(floor(extract(epoch FROM now())::float8 / r.period)
                                            * r.period)
            FROM rate_wanted w, rate_locked l
            WHERE r.key = w.rate_key AND l.key = r.key
            RETURNING r.key, r.last_grant
        ), rate_ranked AS (
            SELECT n.*, row_number() OVER (PARTITION BY n.rate_key ORDER BY n.ord) AS rate_rank,
                   (n.rate_key IS NOT NULL
                    AND n.rate_key NOT IN (SELECT key FROM rate_locked)) AS rate_busy
            FROM numbered n WHERE NOT n.paused
        ), rate_passed AS (
            SELECT r.* FROM rate_ranked r
            WHERE NOT r.rate_busy
              AND (r.rate_key IS NULL
                   OR r.rate_rank <= (SELECT g.last_grant FROM rate_grant g
                                      WHERE g.key = r.rate_key))
        ), key_wanted AS (
            SELECT concurrency_key, max(concurrency_limit) AS lim, count(*) AS wanted
            FROM rate_passed WHERE concurrency_key IS NOT NULL
            GROUP BY concurrency_key
        ), key_locked AS (
            SELECT s.key FROM :"schema".pqjobs_key_slot s
            WHERE s.key IN (SELECT concurrency_key FROM key_wanted)
            FOR UPDATE SKIP LOCKED
        ), key_grant AS (
            -- A slot is taken only while fewer than the limit run; the trigger
            -- pqjobs_job_left_running gives slots back.
            UPDATE :"schema".pqjobs_key_slot AS s
            SET last_grant = least(w.wanted, greatest(w.lim - s.running, 0)),
                running = s.running + least(w.wanted, greatest(w.lim - s.running, 0))
            FROM key_wanted w, key_locked l
            WHERE s.key = w.concurrency_key AND l.key = s.key
            RETURNING s.key, s.last_grant
        ), key_ranked AS (
            SELECT r.id, r.concurrency_key,
                   row_number() OVER (PARTITION BY r.concurrency_key ORDER BY r.ord) AS key_rank,
                   (r.concurrency_key IS NOT NULL
                    AND r.concurrency_key NOT IN (SELECT key FROM key_locked)) AS key_busy
            FROM rate_passed r
        ), go AS (
            SELECT k.id FROM key_ranked k
            WHERE NOT k.key_busy
              AND (k.concurrency_key IS NULL
                   OR k.key_rank <= (SELECT g.last_grant FROM key_grant g
                                     WHERE g.key = k.concurrency_key))
        ), busy AS (
            SELECT id FROM rate_ranked WHERE rate_busy
            UNION ALL
            SELECT id FROM key_ranked WHERE key_busy
        ), claimed AS (
            UPDATE :"schema".pqjobs_job AS j
            SET status = 'running', attempts = j.attempts + 1, locked_at = now(),
                locked_by = $1, heartbeat_at = now(), updated_at = now()
            FROM go
            WHERE j.id = go.id
            RETURNING j.*, j.ctid AS row_tid
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
            WHERE j.id = n.id AND n.id NOT IN (SELECT id FROM go)
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
               row_tid::text, held.n
        FROM (SELECT count(*) AS n FROM held) AS held LEFT JOIN claimed ON true
        ORDER BY priority DESC, run_after, id$full$
            USING p_worker, p_limit, p_queues, p_floor;
        RETURN;
    END IF;
    -- The usual claim. The picked rows are locked by this transaction, so they are still
    -- where the scan found them: claimed there, by a TID scan, the one plan left (no index
    -- applies to the statement, sequential scans are off). Planned once per session, it must
    -- not depend on the planner's statistics, which for a queue table are often those of an
    -- empty table: by primary key, the plan made then read a whole index once the table had
    -- grown. (Planner settings are left alone: triggers run under them too.)
    RETURN QUERY
        WITH claimed AS (
            UPDATE :"schema".pqjobs_job AS j
            SET status = 'running', attempts = j.attempts + 1, locked_at = now(),
                locked_by = p_worker, heartbeat_at = now(), updated_at = now()
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
               row_tid::text, 0::bigint
        FROM claimed
        ORDER BY priority DESC, run_after, id;
END
$$;

REVOKE ALL ON FUNCTION :"schema".pqjobs_claim(text, integer, text[], integer) FROM PUBLIC;

DO $grant$
DECLARE
    caller text;
BEGIN
    FOREACH caller IN ARRAY string_to_array(current_setting('pqjobs.claim_callers'), ',') LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION :"schema".pqjobs_claim(%s) TO %s',
                       'text, integer, text[], integer', caller);
    END LOOP;
END
$grant$;

RESET pqjobs.claim_callers;
