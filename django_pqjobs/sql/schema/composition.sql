-- Batches, dependencies and wait_for(): their bookkeeping is done by the database, so it
-- holds however a job's status changes (worker, rescue, admin, code) and whoever changes it.
--
-- A statement trigger notes each member or prerequisite that becomes finished (or
-- unfinished again: Retry), or is deleted while active, in the unlogged pqjobs_settle; a
-- deferred trigger settles the transaction's notes at its commit: dependents become ready
-- (or cancelled), then batch counts move and a batch whose last member finished gets its
-- callbacks. Settling takes the row locks of dependents and batches in id order, so workers
-- finishing members of the same batches never deadlock, and the batch row lock makes
-- exactly one transaction see its last member finish.
--
-- Status changes made here: waiting → ready (the last dependency done), waiting →
-- cancelled (a dependency failed, was cancelled, expired or was deleted, and the dependent
-- cancels). A dependent whose policy is 'halt' (a sequence's) does not count a dependency
-- that failed: it goes on once that job is retried and done, or skipped (failed →
-- cancelled, or deleted), so those endings of a failed job are noted too.
-- The functions run with the owner's rights (SECURITY DEFINER) so that roles that finish,
-- cancel or delete jobs need no grant on pqjobs_settle or pqjobs_batch; no client role may
-- call them (privileges.sql), but pqjobs_batch_seal().

-- The statement trigger's note. Old and new rows are matched by grouping on the job id, not
-- by a join: PL/pgSQL keeps the plan made for the session's first statement, and no plan of
-- a grouping is quadratic whatever size it was made for. JIT off: a plan made for a large
-- statement must not be compiled again at every small one. A statement touching no batch
-- member or prerequisite (plain jobs: the hot path) stops at the first scan.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_note_changes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET jit = off
AS $$
DECLARE
    first boolean;
    noted integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        first := current_setting('pqjobs.unsettled', true) IS DISTINCT FROM 'on';
        -- (a failed job that halts its dependents is noted without its batch: the batch
        -- counted it when it failed, and a finished member's deletion leaves its counts)
        INSERT INTO :"schema".pqjobs_settle
        SELECT txid_current(), o.id,
               CASE WHEN o.status = 'failed' THEN NULL ELSE o.batch_id END,
               o.has_dependents, o.status, 'deleted', first AND row_number() OVER () = 1
        FROM pqjobs_old o
        WHERE (o.batch_id IS NOT NULL OR o.has_dependents)
              AND o.status NOT IN ('done', 'failed', 'cancelled', 'expired')
           OR o.has_dependents AND o.status = 'failed';
    ELSE
        -- (in this branch: the DELETE trigger has no pqjobs_new) A change is noted only
        -- where a row's old or new status is final: a statement that neither finishes nor
        -- reopens a member or a prerequisite (a claim, a release) stops here.
        IF NOT EXISTS (
            SELECT FROM pqjobs_new n
            WHERE (n.batch_id IS NOT NULL OR n.has_dependents)
              AND n.status IN ('done', 'failed', 'cancelled', 'expired')
        ) AND NOT EXISTS (
            SELECT FROM pqjobs_old o
            WHERE (o.batch_id IS NOT NULL OR o.has_dependents)
              AND o.status IN ('done', 'failed', 'cancelled', 'expired')
        ) THEN
            RETURN NULL;
        END IF;
        first := current_setting('pqjobs.unsettled', true) IS DISTINCT FROM 'on';
        -- Each changed row's old and new versions, matched by grouping on the id rather
        -- than by a join: no plan of a grouping is quadratic, whatever size it was made for.
        INSERT INTO :"schema".pqjobs_settle
        SELECT txid_current(), c.id, c.batch_id, c.has_dependents, c.old_status,
               c.new_status, first AND row_number() OVER () = 1
        FROM (
            SELECT v.id, max(v.batch_id) AS batch_id,
                   bool_or(v.has_dependents) AS has_dependents,
                   max(v.old_status) AS old_status, max(v.new_status) AS new_status
            FROM (
                SELECT n.id, n.batch_id, n.has_dependents, NULL::text AS old_status,
                       n.status::text AS new_status
                FROM pqjobs_new n
                WHERE n.batch_id IS NOT NULL OR n.has_dependents
                UNION ALL
                SELECT o.id, NULL, NULL, o.status::text, NULL
                FROM pqjobs_old o
            ) v
            GROUP BY v.id
        ) c
        WHERE c.new_status IS NOT NULL
          AND ((c.old_status IN ('done', 'failed', 'cancelled', 'expired'))
               <> (c.new_status IN ('done', 'failed', 'cancelled', 'expired'))
               OR c.old_status = 'failed' AND c.new_status IN ('cancelled', 'expired'));
    END IF;
    GET DIAGNOSTICS noted = ROW_COUNT;
    IF first AND noted > 0 THEN
        PERFORM set_config('pqjobs.unsettled', 'on', true);
    END IF;
    RETURN NULL;
END
$$;

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

-- All members are in: a batch with none active finishes now (an empty one, or one whose
-- members all finished before the batch was sealed). Called by batch() as it closes.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_batch_seal(p_batch bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    left_active integer;
BEGIN
    UPDATE :"schema".pqjobs_batch SET sealed = true WHERE id = p_batch AND NOT sealed
    RETURNING pending INTO left_active;
    IF left_active = 0 THEN
        PERFORM :"schema".pqjobs_batch_finished(p_batch);
    END IF;
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

DROP TRIGGER IF EXISTS pqjobs_settle_at_commit ON :"schema".pqjobs_settle;
CREATE CONSTRAINT TRIGGER pqjobs_settle_at_commit
AFTER INSERT ON :"schema".pqjobs_settle
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW
WHEN (NEW.carrier)
EXECUTE FUNCTION :"schema".pqjobs_settle();

-- wait_for(): the finish of a job someone waits on is announced (payload: the job id). Runs
-- with the rights of whoever finished the job (it only sends a notification).
CREATE OR REPLACE FUNCTION :"schema".pqjobs_announce_finish() RETURNS trigger
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    PERFORM pg_notify('pqjobs_finished', NEW.id::text);
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS pqjobs_job_waited_finished ON :"schema".pqjobs_job_hot;
CREATE TRIGGER pqjobs_job_waited_finished
AFTER UPDATE OF status ON :"schema".pqjobs_job_hot
FOR EACH ROW
WHEN (NEW.waited_on AND NEW.status IN ('done', 'failed', 'cancelled', 'expired')
      AND OLD.status NOT IN ('done', 'failed', 'cancelled', 'expired'))
EXECUTE FUNCTION :"schema".pqjobs_announce_finish();
