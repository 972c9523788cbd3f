-- Partitioned history (issue 32). pqjobs_job and pqjobs_attempt become tables partitioned
-- by LIST (shelf); the tables as they were become their 'hot' partitions, attached in
-- place (no row is copied: the migration takes as long as one scan of each table, which
-- checks the partition bound). History partitions, one per finished status and span of days,
-- are made and dropped by pqjobs_history_prepare() and pqjobs_history_drop()
-- (schema/history.sql); the mover that fills them runs in the workers' maintenance.
--
-- What moves where: the row triggers stay on the hot table (history rows need none); the
-- statement triggers move to the parent, since a statement names the parent; the unique
-- index of dedupe keys is the parent's, with the shelf in its key (a partitioned table's
-- unique index must hold its partition key; the mover shelves no job that still holds a
-- key). The parent's id comes from the hot table's sequence, and every role granted on a
-- table is granted the same on its parent (with USAGE on the sequence where it inserts).
-- The functions below that read or change ready, blocked, waiting or running jobs now say
-- shelf = 'hot' in each such statement: PostgreSQL plans and locks the hot partition alone
-- (a statement that finds rows by TID must: a TID names a row within one partition).
DROP TRIGGER IF EXISTS pqjobs_job_composed_status ON :"schema".pqjobs_job;
DROP TRIGGER IF EXISTS pqjobs_job_composed_deleted ON :"schema".pqjobs_job;
DROP TRIGGER IF EXISTS pqjobs_job_paused_at_enqueue ON :"schema".pqjobs_job;
DROP INDEX IF EXISTS :"schema".pqjobs_job_unique_key;

ALTER TABLE :"schema".pqjobs_job ADD COLUMN shelf text NOT NULL DEFAULT 'hot';
ALTER TABLE :"schema".pqjobs_attempt ADD COLUMN shelf text NOT NULL DEFAULT 'hot';
ALTER TABLE :"schema".pqjobs_job RENAME TO pqjobs_job_hot;
ALTER TABLE :"schema".pqjobs_attempt RENAME TO pqjobs_attempt_hot;

-- The hot tables' ids become plain columns with a default drawn from a sequence of the same
-- name (owned by the column), the value it had and the grants on it kept: Django made them
-- identity columns, and PostgreSQL 17 and later refuse to attach a partition that has one
-- ("The new partition may not contain an identity column"). Databases partitioned by
-- this migration before it did so (on 15 or 16, where the identity stayed) are brought to
-- the same form by migration 0030.
DO $do$
DECLARE
    hot regclass;
    sequence_name text;
    last bigint;
    called boolean;
    grants text[];
    one text;
BEGIN
    FOREACH hot IN ARRAY ARRAY[':"schema".pqjobs_job_hot'::regclass,
                               ':"schema".pqjobs_attempt_hot'::regclass] LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_attribute
                                  WHERE attrelid = hot AND attname = 'id' AND attidentity <> '');
        sequence_name := pg_get_serial_sequence(hot::text, 'id');
        EXECUTE format('SELECT last_value, is_called FROM %s', sequence_name) INTO last, called;
        SELECT coalesce(array_agg(format('GRANT %s ON SEQUENCE %s TO %s', a.privilege_type,
                                         sequence_name,
                                         CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                              ELSE quote_ident(pg_get_userbyid(a.grantee)) END)),
                        '{}')
        INTO grants
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = sequence_name::regclass AND a.grantee <> c.relowner;
        EXECUTE format('ALTER TABLE %s ALTER COLUMN id DROP IDENTITY', hot);
        EXECUTE format('CREATE SEQUENCE %s AS bigint OWNED BY %s.id', sequence_name, hot);
        PERFORM setval(sequence_name, last, called);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN id SET DEFAULT nextval(%L::regclass)', hot,
                       sequence_name);
        FOREACH one IN ARRAY grants LOOP
            EXECUTE one;
        END LOOP;
    END LOOP;
END
$do$;

CREATE TABLE :"schema".pqjobs_job (
    LIKE :"schema".pqjobs_job_hot INCLUDING DEFAULTS INCLUDING CONSTRAINTS
) PARTITION BY LIST (shelf);
CREATE TABLE :"schema".pqjobs_attempt (
    LIKE :"schema".pqjobs_attempt_hot INCLUDING DEFAULTS INCLUDING CONSTRAINTS
) PARTITION BY LIST (shelf);

DO $do$
DECLARE
    pair record;
    sequence_name text;
    granted record;
BEGIN
    FOR pair IN SELECT * FROM (VALUES
        (':"schema".pqjobs_job'::regclass, ':"schema".pqjobs_job_hot'::regclass),
        (':"schema".pqjobs_attempt'::regclass, ':"schema".pqjobs_attempt_hot'::regclass)
    ) AS t(parent, hot) LOOP
        sequence_name := pg_get_serial_sequence(pair.hot::text, 'id');
        EXECUTE format('ALTER TABLE %s ALTER COLUMN id SET DEFAULT nextval(%L::regclass)',
                       pair.parent, sequence_name);
        FOR granted IN
            SELECT a.privilege_type,
                   CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                        ELSE quote_ident(pg_get_userbyid(a.grantee)) END AS role
            FROM pg_class c, aclexplode(c.relacl) a
            WHERE c.oid = pair.hot AND a.grantee <> c.relowner
        LOOP
            EXECUTE format('GRANT %s ON %s TO %s', granted.privilege_type, pair.parent,
                           granted.role);
            IF granted.privilege_type = 'INSERT' THEN
                EXECUTE format('GRANT USAGE ON SEQUENCE %s TO %s', sequence_name, granted.role);
            END IF;
        END LOOP;
    END LOOP;
END
$do$;

ALTER TABLE :"schema".pqjobs_job ATTACH PARTITION :"schema".pqjobs_job_hot FOR VALUES IN ('hot');
ALTER TABLE :"schema".pqjobs_attempt
    ATTACH PARTITION :"schema".pqjobs_attempt_hot FOR VALUES IN ('hot');

-- the hot table's part of the index first, under a name of its own: the parent's takes it
CREATE UNIQUE INDEX pqjobs_job_hot_unique_key
    ON :"schema".pqjobs_job_hot (job_type, dedupe_key, (COALESCE(unique_until, 'infinity'::timestamptz)), shelf)
    WHERE dedupe_key IS NOT NULL AND (status IN ('ready', 'blocked', 'running') OR (unique_states & CASE status WHEN 'done' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 4 ELSE 0 END) <> 0);

CREATE UNIQUE INDEX IF NOT EXISTS pqjobs_job_unique_key
    ON :"schema".pqjobs_job (job_type, dedupe_key, (COALESCE(unique_until, 'infinity'::timestamptz)), shelf)
    WHERE dedupe_key IS NOT NULL AND (status IN ('ready', 'blocked', 'running') OR (unique_states & CASE status WHEN 'done' THEN 1 WHEN 'failed' THEN 2 WHEN 'cancelled' THEN 4 ELSE 0 END) <> 0);

DROP TRIGGER IF EXISTS pqjobs_job_composed_status ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_composed_status
AFTER UPDATE ON :"schema".pqjobs_job
REFERENCING OLD TABLE AS pqjobs_old NEW TABLE AS pqjobs_new
FOR EACH STATEMENT
EXECUTE FUNCTION :"schema".pqjobs_note_changes();

DROP TRIGGER IF EXISTS pqjobs_job_composed_deleted ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_composed_deleted
AFTER DELETE ON :"schema".pqjobs_job
REFERENCING OLD TABLE AS pqjobs_old
FOR EACH STATEMENT
EXECUTE FUNCTION :"schema".pqjobs_note_changes();

DROP TRIGGER IF EXISTS pqjobs_job_paused_at_enqueue ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_paused_at_enqueue
AFTER INSERT ON :"schema".pqjobs_job
REFERENCING NEW TABLE AS pqjobs_new
FOR EACH STATEMENT
EXECUTE FUNCTION :"schema".pqjobs_flow_hold_paused();

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

CREATE OR REPLACE FUNCTION :"schema".pqjobs_settle() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET jit = off
AS $$
DECLARE
    me bigint := txid_current();
    a_job bigint[];
    a_batch bigint[];
    a_dependents boolean[];
    a_old text[];
    a_new text[];
    b record;
    left_active integer;
    is_sealed boolean;
    released text[];
    cascaded integer;
BEGIN
    -- Settles all of this transaction's notes (fired by the carrier, the first of them).
    -- Settling may change more jobs (a cancelled dependent, say), whose notes the next
    -- round takes: they are not carriers while the flag is on.
    LOOP
        WITH taken AS (DELETE FROM :"schema".pqjobs_settle WHERE txid = me RETURNING *)
        SELECT array_agg(job_id), array_agg(batch_id), array_agg(has_dependents),
               array_agg(old_status), array_agg(new_status)
        INTO a_job, a_batch, a_dependents, a_old, a_new
        FROM taken;
        EXIT WHEN a_job IS NULL;
        cascaded := 0;

        -- Dependents of prerequisites that finished (or were deleted while active), and of
        -- failed ones skipped (for dependents that halt).
        IF true = ANY(a_dependents) THEN
            IF 'waiting' = ANY(a_old) THEN
                -- A job of a sequence that leaves it while still waiting (cancelled,
                -- expired, deleted) hands what it waited for to the job after it, so the
                -- sequence still runs one job at a time. Those prerequisites are locked
                -- first: one finishing meanwhile does so after this commit, and its commit
                -- then sees the new edge.
                PERFORM 1 FROM :"schema".pqjobs_job e
                WHERE e.id IN (
                    SELECT p.depends_on_id FROM :"schema".pqjobs_dependency p
                    JOIN unnest(a_job, a_dependents, a_old, a_new)
                         AS s(job_id, has_dependents, old_status, new_status)
                         ON s.job_id = p.job_id
                    WHERE s.has_dependents AND s.old_status = 'waiting'
                      AND s.new_status IN ('cancelled', 'expired', 'deleted'))
                ORDER BY e.id
                FOR NO KEY UPDATE;
                WITH handed AS (
                    INSERT INTO :"schema".pqjobs_dependency (job_id, depends_on_id)
                    SELECT DISTINCT f.job_id, p.depends_on_id
                    FROM unnest(a_job, a_dependents, a_old, a_new)
                         AS s(job_id, has_dependents, old_status, new_status)
                    JOIN :"schema".pqjobs_dependency f ON f.depends_on_id = s.job_id
                    JOIN :"schema".pqjobs_job w
                         ON w.id = f.job_id AND w.status = 'waiting'
                            AND w.sequence_key IS NOT NULL
                    JOIN :"schema".pqjobs_dependency p ON p.job_id = s.job_id
                    JOIN :"schema".pqjobs_job e ON e.id = p.depends_on_id
                    WHERE s.has_dependents AND s.old_status = 'waiting'
                      AND s.new_status IN ('cancelled', 'expired', 'deleted')
                      AND (e.status NOT IN ('done', 'failed', 'cancelled', 'expired')
                           OR e.status = 'failed' AND w.on_dependency_failure = 'halt')
                    ON CONFLICT DO NOTHING
                    RETURNING job_id
                )
                UPDATE :"schema".pqjobs_job AS j SET waiting_for = j.waiting_for + h.n
                FROM (SELECT job_id, count(*) AS n FROM handed GROUP BY job_id) h
                WHERE j.shelf = 'hot' AND j.id = h.job_id;
            END IF;
            PERFORM 1 FROM :"schema".pqjobs_job j
            WHERE j.shelf = 'hot' AND j.status = 'waiting' AND j.id IN (
                SELECT d.job_id FROM :"schema".pqjobs_dependency d
                JOIN unnest(a_job, a_batch, a_dependents, a_old, a_new)
                     AS s(job_id, batch_id, has_dependents, old_status, new_status)
                     ON s.job_id = d.depends_on_id
                WHERE s.has_dependents AND s.old_status NOT IN ('done', 'cancelled', 'expired'))
            ORDER BY j.id
            FOR UPDATE;
            WITH x AS (
                -- Per waiting dependent, the prerequisites whose change ends its wait on
                -- them: an active one that finished, for a dependent that halts one that
                -- did not fail, or a failed one skipped (cancelled, expired, deleted).
                SELECT d.job_id,
                       count(*) FILTER (WHERE s.old_status <> 'failed') AS finished,
                       count(*) FILTER (WHERE s.new_status <> 'failed') AS finished_halting,
                       min(s.job_id) FILTER (WHERE s.old_status <> 'failed'
                                             AND s.new_status <> 'done') AS bad_id,
                       (array_agg(s.new_status ORDER BY s.job_id)
                            FILTER (WHERE s.old_status <> 'failed'
                                    AND s.new_status <> 'done'))[1] AS bad_status
                FROM :"schema".pqjobs_dependency d
                JOIN unnest(a_job, a_batch, a_dependents, a_old, a_new)
                     AS s(job_id, batch_id, has_dependents, old_status, new_status)
                     ON s.job_id = d.depends_on_id
                WHERE s.has_dependents AND s.old_status NOT IN ('done', 'cancelled', 'expired')
                  AND (s.old_status <> 'failed'
                       OR s.new_status IN ('cancelled', 'expired', 'deleted'))
                GROUP BY d.job_id
            ), moved AS (
                UPDATE :"schema".pqjobs_job AS j SET
                    waiting_for = j.waiting_for - CASE j.on_dependency_failure
                        WHEN 'halt' THEN x.finished_halting ELSE x.finished END,
                    status = CASE
                        WHEN x.bad_id IS NOT NULL AND j.on_dependency_failure = 'cancel'
                            THEN 'cancelled'
                        WHEN j.waiting_for - CASE j.on_dependency_failure
                            WHEN 'halt' THEN x.finished_halting ELSE x.finished END <= 0
                            THEN 'ready'
                        ELSE 'waiting' END,
                    finished_at = CASE
                        WHEN x.bad_id IS NOT NULL AND j.on_dependency_failure = 'cancel'
                            THEN now() END,
                    error_type = CASE
                        WHEN x.bad_id IS NOT NULL AND j.on_dependency_failure = 'cancel'
                            THEN 'DependencyFailed' ELSE j.error_type END,
                    last_error = CASE
                        WHEN x.bad_id IS NOT NULL AND j.on_dependency_failure = 'cancel'
                            THEN format('dependency #%s %s', x.bad_id, CASE x.bad_status
                                WHEN 'failed' THEN 'failed'
                                WHEN 'cancelled' THEN 'was cancelled'
                                WHEN 'expired' THEN 'expired'
                                ELSE 'was deleted before it finished' END)
                        ELSE j.last_error END,
                    updated_at = now()
                FROM x
                WHERE j.shelf = 'hot' AND j.id = x.job_id AND j.status = 'waiting'
                  AND CASE j.on_dependency_failure
                      WHEN 'halt' THEN x.finished_halting ELSE x.finished END > 0
                RETURNING j.status, j.queue
            )
            SELECT array_agg(DISTINCT queue) FILTER (WHERE status = 'ready'),
                   count(*) FILTER (WHERE status = 'cancelled')
            INTO released, cascaded
            FROM moved;
            IF released IS NOT NULL AND :"schema".pqjobs_anyone_listens() THEN
                PERFORM pg_notify('pqjobs', q) FROM unnest(released) q;
            END IF;
        END IF;

        -- Batch counts, batch by batch in id order; the one whose last member just
        -- finished (and that is sealed) gets its callbacks.
        FOR b IN
            SELECT s.batch_id,
                   sum((s.old_status IN ('done', 'failed', 'cancelled', 'expired'))::integer
                       - (s.new_status IN ('done', 'failed', 'cancelled', 'expired')
                          OR s.new_status = 'deleted')::integer)
                       AS d_pending,
                   sum((s.new_status = 'done')::integer - (s.old_status = 'done')::integer)
                       AS d_done,
                   sum((s.new_status = 'failed')::integer
                       - (s.old_status = 'failed')::integer) AS d_failed,
                   -- (an expired member counts as cancelled: it never ran)
                   sum((s.new_status IN ('cancelled', 'expired', 'deleted'))::integer
                       - (s.old_status IN ('cancelled', 'expired'))::integer) AS d_cancelled
            FROM unnest(a_job, a_batch, a_dependents, a_old, a_new)
                AS s(job_id, batch_id, has_dependents, old_status, new_status)
            WHERE s.batch_id IS NOT NULL
            GROUP BY s.batch_id
            ORDER BY s.batch_id
        LOOP
            UPDATE :"schema".pqjobs_batch SET
                pending = pending + b.d_pending,
                done = done + b.d_done,
                failed = failed + b.d_failed,
                cancelled = cancelled + b.d_cancelled,
                finished_at = CASE WHEN pending + b.d_pending > 0 THEN NULL
                                   ELSE finished_at END
            WHERE id = b.batch_id
            RETURNING pending, sealed INTO left_active, is_sealed;
            IF left_active = 0 AND b.d_pending < 0 AND is_sealed THEN
                PERFORM :"schema".pqjobs_batch_finished(b.batch_id);
            END IF;
        END LOOP;
        -- only a dependent cancelled here can have left notes of its own
        EXIT WHEN cascaded = 0;
    END LOOP;
    PERFORM set_config('pqjobs.unsettled', '', true);
    RETURN NULL;
END
$$;

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
    WHERE j.shelf = 'hot' AND j.status = 'ready' AND j.fair_turn IS NOT NULL
      AND j.fair_key = NEW.fair_key AND j.priority = NEW.priority
    ORDER BY j.fair_key DESC, j.priority DESC, j.fair_turn DESC
    LIMIT 1;
    SELECT j.fair_turn INTO head FROM :"schema".pqjobs_job j
    WHERE j.shelf = 'hot' AND j.status = 'ready' AND j.fair_turn IS NOT NULL
      AND j.priority = NEW.priority
    ORDER BY j.priority DESC, j.fair_turn
    LIMIT 1;
    SELECT w.weight INTO key_weight FROM :"schema".pqjobs_fair_weight w
    WHERE w.key = NEW.fair_key;
    NEW.fair_turn := greatest(last_turn, head, 0) + 1.0 / COALESCE(key_weight, 1);
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_slot_freed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    promoted RECORD;
BEGIN
    UPDATE :"schema".pqjobs_key_slot SET running = greatest(running - 1, 0)
    WHERE key = OLD.concurrency_key;
    UPDATE :"schema".pqjobs_job SET status = 'ready', blocked_by = NULL, updated_at = now()
    WHERE shelf = 'hot' AND id = (
        SELECT id FROM :"schema".pqjobs_job
        WHERE shelf = 'hot' AND status = 'blocked' AND blocked_by = 'limit'
          AND concurrency_key = OLD.concurrency_key
        ORDER BY priority DESC, run_after, id
        LIMIT 1
        FOR UPDATE SKIP LOCKED
    )
    RETURNING queue INTO promoted;
    IF FOUND THEN
        PERFORM pg_notify('pqjobs', promoted.queue);
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_admit() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
-- Planned once per session, often on an empty table's statistics, then used for inserts of
-- 100,000 rows in one statement: pinned to the indexes of ready keyed jobs.
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
DECLARE
    free integer;
    waiting integer;
BEGIN
    IF NEW.concurrency_key IS NOT NULL THEN
        INSERT INTO :"schema".pqjobs_key_slot (key, running, last_grant)
        VALUES (NEW.concurrency_key, 0, 0) ON CONFLICT DO NOTHING;
    END IF;
    IF NEW.rate_key IS NOT NULL THEN
        INSERT INTO :"schema".pqjobs_rate (key, allowance, period, used, last_grant)
        VALUES (NEW.rate_key, NEW.rate_limit, NEW.rate_period, 0, 0) ON CONFLICT DO NOTHING;
        -- a declaration that changed takes effect with the next job enqueued
        UPDATE :"schema".pqjobs_rate SET allowance = NEW.rate_limit, period = NEW.rate_period
        WHERE key = NEW.rate_key
          AND (allowance, period) IS DISTINCT FROM (NEW.rate_limit, NEW.rate_period);
    END IF;
    IF NEW.status <> 'ready' OR NEW.run_after > now() OR NEW.fair_key IS NOT NULL THEN
        -- Not due: the claim decides when it is. With a fair key: the claim, which takes
        -- turns, decides which of the key's jobs start (held here, they would wait in age
        -- order behind the other tenants' jobs).
        RETURN NEW;
    END IF;
    IF NEW.rate_key IS NOT NULL THEN
        SELECT r.allowance - CASE
                WHEN r.window_start = to_timestamp(floor(extract(epoch FROM now())::float8
                                                         / r.period) * r.period)
                THEN r.used ELSE 0 END
        INTO free
        FROM :"schema".pqjobs_rate r WHERE r.key = NEW.rate_key;
        SELECT count(*) INTO waiting FROM (
            SELECT 1 FROM :"schema".pqjobs_job j
            WHERE j.shelf = 'hot' AND j.status = 'ready' AND j.rate_key = NEW.rate_key
              AND j.priority >= NEW.priority AND j.run_after <= now()
            LIMIT greatest(free, 0)
        ) ahead;
        IF waiting >= free THEN
            NEW.status := 'blocked';
            NEW.blocked_by := 'rate';
            RETURN NEW;
        END IF;
    END IF;
    IF NEW.concurrency_key IS NOT NULL THEN
        SELECT NEW.concurrency_limit - greatest(s.running, 0) INTO free
        FROM :"schema".pqjobs_key_slot s WHERE s.key = NEW.concurrency_key;
        SELECT count(*) INTO waiting FROM (
            SELECT 1 FROM :"schema".pqjobs_job j
            WHERE j.shelf = 'hot' AND j.status = 'ready'
              AND j.concurrency_key = NEW.concurrency_key
              AND j.priority >= NEW.priority AND j.run_after <= now()
            LIMIT greatest(free, 0)
        ) ahead;
        IF waiting >= free THEN
            NEW.status := 'blocked';
            NEW.blocked_by := 'limit';
        END IF;
    END IF;
    RETURN NEW;
END
$$;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_flow_hold_paused() RETURNS trigger
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM :"schema".pqjobs_pause) THEN
        RETURN NULL;
    END IF;
    UPDATE :"schema".pqjobs_job AS j
    SET status = 'blocked', blocked_by = 'paused', updated_at = now()
    FROM pqjobs_new n
    WHERE j.shelf = 'hot' AND j.id = n.id AND n.status = 'ready' AND j.status = 'ready'
      AND EXISTS (SELECT 1 FROM :"schema".pqjobs_pause z
                  WHERE (z.kind = 'queue' AND z.name = n.queue)
                     OR (z.kind = 'job_type' AND z.name = n.job_type));
    RETURN NULL;
END
$$;

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
    WHERE j.shelf = 'hot' AND j.id = p_job AND j.status = 'running' AND j.locked_by = p_worker
      AND j.attempts = p_attempt
    ON CONFLICT (job_id, name) DO NOTHING;
    RETURN FOUND;
END
$$;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_history_prepare(p_shelves text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    wanted text;
    job_status text;
    day date;
    span integer;
    job_part text;
    attempt_part text;
    made integer := 0;
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext('pqjobs_history'));
    FOREACH wanted IN ARRAY COALESCE(p_shelves, '{}') LOOP
        IF wanted IS NULL OR wanted !~
               '^(done|failed|cancelled|expired)/[0-9]{4}-[0-9]{2}-[0-9]{2}/([1-9]|[12][0-9]|3[01])$'
        THEN
            RAISE EXCEPTION 'pqjobs_history_prepare: % is not a history shelf (done, failed, '
                'cancelled or expired, a slash, the first day as YYYY-MM-DD, a slash, 1 to 31 '
                'days)', quote_nullable(wanted) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        span := split_part(wanted, '/', 3)::integer;
        job_status := split_part(wanted, '/', 1);
        BEGIN
            day := to_date(split_part(wanted, '/', 2), 'YYYY-MM-DD');
        EXCEPTION WHEN datetime_field_overflow OR invalid_datetime_format THEN
            day := NULL;
        END;
        IF day IS NULL OR to_char(day, 'YYYY-MM-DD') <> split_part(wanted, '/', 2) THEN
            RAISE EXCEPTION 'pqjobs_history_prepare: % names no day of the calendar',
                quote_literal(wanted) USING ERRCODE = 'invalid_parameter_value';
        END IF;
        job_part := 'pqjobs_job_' || job_status || '_' || to_char(day, 'YYYYMMDD') || '_' || span;
        attempt_part := 'pqjobs_attempt_' || job_status || '_' || to_char(day, 'YYYYMMDD')
            || '_' || span;
        CONTINUE WHEN to_regclass(format(':"schema".%I', job_part)) IS NOT NULL;
        -- Made apart and attached: ATTACH takes a lock on the parent that lets the queue's
        -- reads and writes go on (CREATE ... PARTITION OF would stop them). The CHECK
        -- states the partition's bound, so ATTACH need not scan it.
        EXECUTE format(
            'CREATE TABLE :"schema".%I (LIKE :"schema".pqjobs_job INCLUDING DEFAULTS '
            'INCLUDING CONSTRAINTS)', job_part);
        EXECUTE format(
            'ALTER TABLE :"schema".%I ADD CONSTRAINT %I CHECK (shelf = %L AND status = %L '
            'AND finished_at >= %L::timestamptz AND finished_at < %L::timestamptz)',
            job_part, job_part || '_bound', wanted, job_status,
            to_char(day, 'YYYY-MM-DD') || ' 00:00:00+00',
            to_char(day + span, 'YYYY-MM-DD') || ' 00:00:00+00');
        -- what the reads of history need: a job by id (the API, the admin's page, a
        -- dependency), the admin's lists (newest first, by type, with an error) and the
        -- members, children and callbacks of a batch or a job
        EXECUTE format('CREATE INDEX ON :"schema".%I (id)', job_part);
        EXECUTE format('CREATE INDEX ON :"schema".%I (job_type, id DESC)', job_part);
        EXECUTE format(
            'CREATE INDEX ON :"schema".%I (id DESC) WHERE last_error <> %L', job_part, '');
        EXECUTE format(
            'CREATE INDEX ON :"schema".%I (batch_id, status) WHERE batch_id IS NOT NULL',
            job_part);
        EXECUTE format(
            'CREATE INDEX ON :"schema".%I (parent_id) WHERE parent_id IS NOT NULL', job_part);
        EXECUTE format(
            'CREATE INDEX ON :"schema".%I (callback_of_id) WHERE callback_of_id IS NOT NULL',
            job_part);
        EXECUTE format(
            'ALTER TABLE :"schema".pqjobs_job ATTACH PARTITION :"schema".%I FOR VALUES IN (%L)',
            job_part, wanted);
        EXECUTE format(
            'CREATE TABLE :"schema".%I (LIKE :"schema".pqjobs_attempt INCLUDING DEFAULTS '
            'INCLUDING CONSTRAINTS)', attempt_part);
        EXECUTE format(
            'ALTER TABLE :"schema".%I ADD CONSTRAINT %I CHECK (shelf = %L)',
            attempt_part, attempt_part || '_bound', wanted);
        EXECUTE format('CREATE INDEX ON :"schema".%I (job_id)', attempt_part);
        EXECUTE format(
            'ALTER TABLE :"schema".pqjobs_attempt ATTACH PARTITION :"schema".%I '
            'FOR VALUES IN (%L)', attempt_part, wanted);
        -- known empty: a table never analyzed is planned as if it held ten pages of rows,
        -- which every estimate over pqjobs_job (the admin's counts, the metrics) would add
        EXECUTE format('ANALYZE :"schema".%I, :"schema".%I', job_part, attempt_part);
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_history_drop(p_status text, p_before date)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '500ms'
AS $$
DECLARE
    part record;
    lowest bigint;
    highest bigint;
    held bigint;
    dropped bigint := 0;
BEGIN
    IF p_status IS NULL OR p_status NOT IN ('done', 'failed', 'cancelled', 'expired') THEN
        RAISE EXCEPTION 'pqjobs_history_drop: % is not a finished status '
            '(done, failed, cancelled or expired)', quote_nullable(p_status)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_before IS NULL THEN
        RAISE EXCEPTION 'pqjobs_history_drop: the day to drop before is missing'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pqjobs_history'));
    FOR part IN
        SELECT c.relname AS job_part,
               replace(c.relname, 'pqjobs_job_', 'pqjobs_attempt_') AS attempt_part
        FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = ':"schema".pqjobs_job'::regclass
          AND c.relname ~ ('^pqjobs_job_' || p_status || '_[0-9]{8}_[0-9]{1,2}$')
          AND to_date(substring(c.relname from '_([0-9]{8})_[0-9]+$'), 'YYYYMMDD')
              + substring(c.relname from '_([0-9]+)$')::integer <= p_before
        ORDER BY c.relname
    LOOP
        EXECUTE format('SELECT min(id), max(id), count(*) FROM :"schema".%I', part.job_part)
            INTO lowest, highest, held;
        EXECUTE format('ALTER TABLE :"schema".pqjobs_job DETACH PARTITION :"schema".%I',
                       part.job_part);
        IF to_regclass(format(':"schema".%I', part.attempt_part)) IS NOT NULL THEN
            EXECUTE format('DROP TABLE :"schema".%I', part.attempt_part);
        END IF;
        IF lowest IS NOT NULL THEN
            EXECUTE format(
                'DELETE FROM :"schema".pqjobs_step s WHERE s.job_id BETWEEN $1 AND $2 '
                'AND EXISTS (SELECT 1 FROM :"schema".%I j WHERE j.id = s.job_id)',
                part.job_part) USING lowest, highest;
            EXECUTE format(
                'DELETE FROM :"schema".pqjobs_signal s WHERE s.job_id BETWEEN $1 AND $2 '
                'AND EXISTS (SELECT 1 FROM :"schema".%I j WHERE j.id = s.job_id)',
                part.job_part) USING lowest, highest;
            EXECUTE format(
                'DELETE FROM :"schema".pqjobs_dependency d WHERE d.job_id BETWEEN $1 AND $2 '
                'AND EXISTS (SELECT 1 FROM :"schema".%I j WHERE j.id = d.job_id)',
                part.job_part) USING lowest, highest;
            EXECUTE format(
                'DELETE FROM :"schema".pqjobs_dependency d '
                'WHERE d.depends_on_id BETWEEN $1 AND $2 '
                'AND EXISTS (SELECT 1 FROM :"schema".%I j WHERE j.id = d.depends_on_id)',
                part.job_part) USING lowest, highest;
        END IF;
        dropped := dropped + held;
        EXECUTE format('DROP TABLE :"schema".%I', part.job_part);
    END LOOP;
    RETURN dropped;
END
$$;

CREATE OR REPLACE FUNCTION :"schema".pqjobs_history_attempts_back() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    UPDATE :"schema".pqjobs_attempt SET shelf = 'hot'
    WHERE job_id = NEW.id AND shelf <> 'hot';
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS pqjobs_job_unshelved ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_unshelved
AFTER INSERT ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN (NEW.status IN ('done', 'failed', 'cancelled', 'expired'))
EXECUTE FUNCTION :"schema".pqjobs_history_attempts_back();

REVOKE ALL ON FUNCTION :"schema".pqjobs_history_prepare(text[]) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_drop(text, date) FROM PUBLIC;
REVOKE ALL ON FUNCTION :"schema".pqjobs_history_attempts_back() FROM PUBLIC;
