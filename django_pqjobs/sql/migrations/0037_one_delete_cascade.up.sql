-- One delete cascade (issue 41): pqjobs_job_forget() removes what jobs leave behind
-- (attempts, steps, signals, dependency edges) for the operator's delete, the prune and
-- pqjobs_history_drop() alike; pqjobs_settle() calls it for the jobs deleted while
-- dependents waited on them, once it has read their edges, and names the hot shelf of the
-- waiting jobs it hands a sequence's place to. The live definitions are in
-- sql/schema/history.sql and sql/schema/composition.sql.

-- The one delete cascade: what jobs leave behind when they go, whoever removes them (an
-- operator's delete, transitions/operator.py; the prune of the hot table,
-- worker/housekeeping.py; a history partition dropped, below; pqjobs_settle() for the jobs
-- it settled a deletion of). Called once the jobs are gone: only the ids of p_ids that no
-- shelf of pqjobs_job holds are forgotten, so no caller can strip a job that is still
-- there. Goes: their attempts, workflow steps and signals; the dependency edges of what they
-- waited for; the edges to them from jobs gone too. Stays:
--   - an edge to a gone job from a job still there: that job's record of what it waited
--     for (its error names it; the endings announcer and the console read it); it goes
--     with that job;
--   - the edges of a gone job that is still its sequence's last job: its place in line,
--     which the sequence's next enqueue reads (composition.py); they go with the jobs they
--     point to, or when prune_sequences forgets the sequence (it calls this again);
--   - the edges of a job this transaction deleted while others wait on it (noted in
--     pqjobs_settle): pqjobs_settle() reads them at the commit (dependents cancelled or
--     released, a sequence's next job takes its place in line), then calls this again;
--   - the audit trail (who deleted which job; pruned by its own retention), and a
--     sequence's or a schedule's last job id (a reference, not a dependent).
-- Returns how many of p_ids were gone. Every lookup goes by index, id by id (nested
-- loops): a hash join would read every history partition to find a few thousand ids gone
-- (measured: 0.9 s a prune batch of 5,000 beside 420,000 jobs in history, 0.06 s so).
CREATE OR REPLACE FUNCTION :"schema".pqjobs_job_forget(p_ids bigint[])
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off
SET enable_hashjoin = off
SET enable_mergejoin = off
SET jit = off
AS $$
DECLARE
    gone bigint[];
    in_line bigint[];
BEGIN
    -- all shelves: a job is gone when no shelf holds it
    SELECT array_agg(g.id) INTO gone FROM unnest(p_ids) AS g(id)
    WHERE g.id IS NOT NULL
      AND NOT EXISTS (SELECT 1 FROM :"schema".pqjobs_job j WHERE j.id = g.id);
    IF gone IS NULL THEN
        RETURN 0;
    END IF;
    -- all shelves: a job's attempts are on its shelf (a dropped partition took its own)
    DELETE FROM :"schema".pqjobs_attempt a WHERE a.job_id = ANY(gone);
    DELETE FROM :"schema".pqjobs_step s WHERE s.job_id = ANY(gone);
    DELETE FROM :"schema".pqjobs_signal s WHERE s.job_id = ANY(gone);
    SELECT array_agg(q.last_job_id) INTO in_line FROM :"schema".pqjobs_sequence q
    WHERE q.last_job_id = ANY(gone);
    DELETE FROM :"schema".pqjobs_dependency d
    WHERE d.job_id = ANY(gone)
      AND d.job_id <> ALL(COALESCE(in_line, '{}'))
      AND NOT EXISTS (
          SELECT 1 FROM :"schema".pqjobs_settle n
          WHERE n.txid = txid_current() AND n.job_id = d.job_id AND n.new_status = 'deleted');
    -- all shelves: an edge to a gone job stays with a dependent still there (a gone job's
    -- kept edges to a gone job tell no one anything: the sequence's next enqueue reads only
    -- edges to jobs that are there, composition.sql's waited_for)
    DELETE FROM :"schema".pqjobs_dependency d
    WHERE d.depends_on_id = ANY(gone)
      AND NOT EXISTS (SELECT 1 FROM :"schema".pqjobs_job j WHERE j.id = d.job_id);
    RETURN cardinality(gone);
END
$$;

REVOKE ALL ON FUNCTION :"schema".pqjobs_job_forget(bigint[]) FROM PUBLIC;

-- The roles that delete jobs (DELETE on pqjobs_job: the admin's, the worker's prune) may
-- call it: delete_jobs and the prune call it once their jobs are gone.
DO $$
DECLARE
    grantee_name name;
BEGIN
    FOR grantee_name IN
        SELECT DISTINCT pg_catalog.pg_get_userbyid(a.grantee)
        FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
        WHERE c.oid = ':"schema".pqjobs_job'::regclass
          AND a.privilege_type = 'DELETE' AND a.grantee <> 0 AND a.grantee <> c.relowner
    LOOP
        EXECUTE pg_catalog.format('GRANT EXECUTE ON FUNCTION %s TO %I',
            ':"schema".pqjobs_job_forget(bigint[])'::regprocedure, grantee_name);
    END LOOP;
END
$$;

-- Drop the history partitions of one status whose span ends by p_before: the jobs, their
-- attempts, and then what else the jobs leave behind (pqjobs_job_forget, for the jobs of
-- the partition, once detached, that have steps, signals or dependency edges). Detaching takes a short exclusive lock on the
-- parent: lock_timeout bounds how long the queue may wait behind it (the caller's next
-- turn tries again).
CREATE OR REPLACE FUNCTION :"schema".pqjobs_history_drop(p_status text, p_before date)
RETURNS bigint
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET lock_timeout = '500ms'
AS $$
DECLARE
    part record;
    ids bigint[];
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
        -- only our partition of that name (a table another role made in its place stays)
        IF EXISTS (SELECT 1 FROM pg_inherits i
                   WHERE i.inhparent = ':"schema".pqjobs_attempt'::regclass
                     AND i.inhrelid = to_regclass(format(':"schema".%I', part.attempt_part)))
        THEN
            EXECUTE format('DROP TABLE :"schema".%I', part.attempt_part);
        END IF;
        -- the jobs that left rows elsewhere (their attempts went with their partition),
        -- looked up within the partition's range of ids, ten thousand a call
        IF lowest IS NOT NULL THEN
            FOR ids IN EXECUTE format(
                'SELECT array_agg(o.id) FROM (SELECT t.id, (row_number() OVER (ORDER BY t.id) '
                '- 1) / 10000 AS chunk FROM ('
                'SELECT s.job_id AS id FROM :"schema".pqjobs_step s WHERE s.job_id BETWEEN $1 '
                'AND $2 UNION SELECT g.job_id FROM :"schema".pqjobs_signal g WHERE g.job_id '
                'BETWEEN $1 AND $2 UNION SELECT d.job_id FROM :"schema".pqjobs_dependency d '
                'WHERE d.job_id BETWEEN $1 AND $2 UNION SELECT d.depends_on_id FROM '
                ':"schema".pqjobs_dependency d WHERE d.depends_on_id BETWEEN $1 AND $2) t '
                'WHERE EXISTS (SELECT 1 FROM :"schema".%I j WHERE j.id = t.id)) o GROUP BY o.chunk',
                part.job_part) USING lowest, highest
            LOOP
                PERFORM :"schema".pqjobs_job_forget(ids);
            END LOOP;
        END IF;
        dropped := dropped + held;
        EXECUTE format('DROP TABLE :"schema".%I', part.job_part);
    END LOOP;
    RETURN dropped;
END
$$;

-- Shelved jobs among p_ids whose status is one of p_statuses back to the hot table, their
-- attempts with them, before a transition changes their status (Retry, Skip; a role that
-- retries jobs may not touch attempts). Returns how many came back.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_history_unshelve(p_ids bigint[], p_statuses text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    back integer;
BEGIN
    -- all shelves: shelved jobs and their attempts back to the hot shelf
    WITH jobs AS (
        UPDATE :"schema".pqjobs_job SET shelf = 'hot'
        WHERE id = ANY(p_ids) AND status = ANY(p_statuses) AND shelf <> 'hot'
        RETURNING id
    ), attempts AS (
        UPDATE :"schema".pqjobs_attempt a SET shelf = 'hot'
        FROM jobs WHERE a.job_id = jobs.id AND a.shelf <> 'hot'
    )
    SELECT count(*) INTO back FROM jobs;
    RETURN back;
END
$$;

-- Settles every note of this transaction, at its commit (fired by the first note).
-- Sequential scans off: the notes come as arrays the planner guesses a hundred-odd rows
-- of, so it would hash-join them with a whole pqjobs_dependency read at every commit (a
-- sequence's drain spent half its time there); off, it looks each edge up by its index.
-- JIT off with it: plans whose only path is a "disabled" sequential scan (a small table)
-- cost enough to be compiled, which takes far longer than running them.
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
                -- all shelves (e): a prerequisite, finished ones in history too
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
                -- all shelves (e): a prerequisite handed on (its status says if it counts)
                WITH handed AS (
                    INSERT INTO :"schema".pqjobs_dependency (job_id, depends_on_id)
                    SELECT DISTINCT f.job_id, p.depends_on_id
                    FROM unnest(a_job, a_dependents, a_old, a_new)
                         AS s(job_id, has_dependents, old_status, new_status)
                    JOIN :"schema".pqjobs_dependency f ON f.depends_on_id = s.job_id
                    JOIN :"schema".pqjobs_job w
                         ON w.shelf = 'hot' AND w.id = f.job_id AND w.status = 'waiting'
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

        -- What the jobs deleted leave behind, now that their edges have been read
        -- (pqjobs_job_forget kept them for this).
        IF 'deleted' = ANY(a_new) THEN
            PERFORM :"schema".pqjobs_job_forget(ARRAY(
                SELECT s.job_id FROM unnest(a_job, a_new) AS s(job_id, new_status)
                WHERE s.new_status = 'deleted'));
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
