-- History: finished jobs leave the hot table for partitions of their status and span of days.
--
-- pqjobs_job and pqjobs_attempt are partitioned by LIST (shelf). Their 'hot' partitions
-- (pqjobs_job_hot, pqjobs_attempt_hot) hold every job that is not finished, and the finished
-- ones until the history mover (transitions/history.py) shelves them, PQJOBS['HISTORY_AFTER']
-- after they finished: their shelf becomes '<status>/<first day>/<days>' and PostgreSQL moves
-- the job, with its attempts, to the partitions of that span of UTC days (a seventh of the
-- status's RETENTION, 1 to 31 days: transitions/history.py). RETENTION then drops whole
-- partitions (pqjobs_history_drop), never deletes their rows one by one. Reads of pqjobs_job see every
-- partition. A history partition's CHECK names its status and its days, so a statement about
-- ready, blocked, waiting or running jobs never plans one (constraint exclusion), and a row
-- whose status changes in place (without going back to the hot table first) is refused.
--
-- The functions below run with the owner's rights (SECURITY DEFINER): prepare and drop run
-- DDL for the worker role that runs maintenance; shelve and unshelve are the only way a job
-- changes shelf for any role but the owner (pqjobs_job_entry_check refuses the rest), and
-- move its attempts with it. They take shelves, statuses and ids only, check them against
-- a strict pattern, build every name with format('%I') and make and drop partitions one
-- call at a time (an advisory lock).
--
-- Ids. The primary key is the hot table's alone (a partitioned table's key must hold its
-- partition key), so nothing but this file keeps a job's id unique across partitions: a
-- row enters pqjobs_job, whoever inserts it, with the id its sequence just drew for this
-- session, in the hot table; only the owner (these functions) moves a row between shelves
-- with the id it has; and no one changes an id.

-- At most 16 shelves a call (each makes two tables and seven indexes, every lock held to
-- the commit: a thousand in one call would fill the server's lock table); the caller asks
-- again for the rest (transitions/history.py: PREPARE_AT_MOST). A span starts on a day
-- whose number since 1970-01-01 its length divides, never after tomorrow (UTC): no job has
-- finished there yet. A name that exists and is not our partition (a role that may CREATE
-- in the schema made it first) is an error naming it and its owner: skipped, it would leave
-- its shelf with no partition, and every move to it failing.
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
    part record;
    taken record;
    owner oid;
    home oid;
    made integer := 0;
    making boolean;
BEGIN
    IF cardinality(p_shelves) > 16 THEN
        RAISE EXCEPTION 'pqjobs_history_prepare: % shelves in one call, at most 16 (call again '
            'for the rest)', cardinality(p_shelves) USING ERRCODE = 'program_limit_exceeded';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pqjobs_history'));
    SELECT c.relowner, c.relnamespace INTO owner, home
    FROM pg_class c WHERE c.oid = ':"schema".pqjobs_job'::regclass;
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
        IF day < date '1970-01-01' OR (day - date '1970-01-01') % span <> 0 THEN
            RAISE EXCEPTION 'pqjobs_history_prepare: % starts no span: a span of % days starts '
                'on a day since 1970-01-01 whose number % divides', quote_literal(wanted),
                span, span USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF day > (now() AT TIME ZONE 'UTC')::date + 1 THEN
            RAISE EXCEPTION 'pqjobs_history_prepare: % starts after tomorrow (UTC): no job '
                'finishes there yet', quote_literal(wanted)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        job_part := 'pqjobs_job_' || job_status || '_' || to_char(day, 'YYYYMMDD') || '_' || span;
        attempt_part := 'pqjobs_attempt_' || job_status || '_' || to_char(day, 'YYYYMMDD')
            || '_' || span;
        making := false;
        FOR part IN SELECT * FROM (VALUES
            (job_part, ':"schema".pqjobs_job'::regclass),
            (attempt_part, ':"schema".pqjobs_attempt'::regclass)
        ) AS t(name, parent) LOOP
            SELECT c.relkind::text AS relkind, pg_get_userbyid(c.relowner) AS holder,
                   c.relowner = owner AND EXISTS (
                       SELECT 1 FROM pg_inherits i
                       WHERE i.inhrelid = c.oid AND i.inhparent = part.parent) AS ours
            INTO taken
            FROM pg_class c WHERE c.relnamespace = home AND c.relname = part.name;
            IF NOT FOUND THEN
                SELECT 't'::text AS relkind, pg_get_userbyid(t.typowner) AS holder, false AS ours
                INTO taken
                FROM pg_type t WHERE t.typnamespace = home AND t.typname = part.name;
            END IF;
            IF FOUND AND NOT taken.ours THEN
                RAISE EXCEPTION 'pqjobs_history_prepare: % is taken: %.% exists and is no '
                    'history partition of % (a % owned by %); drop or rename it (a role that '
                    'may CREATE in the schema made it)', quote_literal(wanted),
                    home::regnamespace, quote_ident(part.name), part.parent,
                    CASE taken.relkind WHEN 'r' THEN 'table' WHEN 'p' THEN 'partitioned table'
                        WHEN 'v' THEN 'view' WHEN 'm' THEN 'materialized view'
                        WHEN 'i' THEN 'index' WHEN 'S' THEN 'sequence'
                        WHEN 'f' THEN 'foreign table' WHEN 't' THEN 'type' WHEN 'c' THEN 'type'
                        ELSE 'relation' END,
                    quote_ident(taken.holder) USING ERRCODE = 'duplicate_object';
            END IF;
            making := making OR NOT FOUND;
        END LOOP;
        CONTINUE WHEN NOT making;
        -- Made apart and attached: ATTACH takes a lock on the parent that lets the queue's
        -- reads and writes go on (CREATE ... PARTITION OF would stop them). The CHECK
        -- states the partition's bound, so ATTACH need not scan it.
        IF to_regclass(format(':"schema".%I', job_part)) IS NULL THEN
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
                'CREATE INDEX ON :"schema".%I (parent_id) WHERE parent_id IS NOT NULL',
                job_part);
            EXECUTE format(
                'CREATE INDEX ON :"schema".%I (callback_of_id) WHERE callback_of_id IS NOT NULL',
                job_part);
            EXECUTE format(
                'ALTER TABLE :"schema".pqjobs_job ATTACH PARTITION :"schema".%I '
                'FOR VALUES IN (%L)', job_part, wanted);
        END IF;
        IF to_regclass(format(':"schema".%I', attempt_part)) IS NULL THEN
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
        END IF;
        -- known empty: a table never analyzed is planned as if it held ten pages of rows,
        -- which every estimate over pqjobs_job (the admin's counts, the metrics) would add
        EXECUTE format('ANALYZE :"schema".%I, :"schema".%I', job_part, attempt_part);
        made := made + 1;
    END LOOP;
    RETURN made;
END
$$;

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

-- Finished jobs onto their shelves (the mover, transitions/history.py, picks them and their
-- shelves): each hot job of p_ids goes to the shelf at the same place in p_shelves, its
-- attempts with it. The shelf's partition must exist (pqjobs_history_prepare) and its CHECK
-- takes only jobs of its status finished within its span. Returns how many jobs moved.
CREATE OR REPLACE FUNCTION :"schema".pqjobs_history_shelve(p_ids bigint[], p_shelves text[])
RETURNS integer
LANGUAGE plpgsql VOLATILE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    moved integer;
BEGIN
    IF cardinality(p_ids) IS DISTINCT FROM cardinality(p_shelves) THEN
        RAISE EXCEPTION 'pqjobs_history_shelve: % ids and % shelves', cardinality(p_ids),
            cardinality(p_shelves) USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_shelves) s WHERE s IS NULL OR s !~
               '^(done|failed|cancelled|expired)/[0-9]{4}-[0-9]{2}-[0-9]{2}/[0-9]{1,2}$') THEN
        RAISE EXCEPTION 'pqjobs_history_shelve: a shelf is not a history shelf'
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    WITH wanted AS (
        SELECT DISTINCT ON (m.id) m.id, m.shelf FROM unnest(p_ids, p_shelves) AS m(id, shelf)
        WHERE m.id IS NOT NULL ORDER BY m.id
    ), jobs AS (
        UPDATE :"schema".pqjobs_job j SET shelf = w.shelf
        FROM wanted w WHERE j.shelf = 'hot' AND j.id = w.id
        RETURNING j.id, j.shelf
    ), attempts AS (
        UPDATE :"schema".pqjobs_attempt a SET shelf = jobs.shelf
        FROM jobs WHERE a.job_id = jobs.id AND a.shelf = 'hot'
    )
    SELECT count(*) INTO moved FROM jobs;
    RETURN moved;
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

-- A row enters pqjobs_job (any partition: the trigger is cloned to each) with the id its
-- sequence just drew in this session (currval: no other session's draw, nor a value a
-- client chose, matches it), in the hot table; or the tables' owner puts it there (the
-- functions above, migrate; TRIGGER stands for the owner: no client role is granted it,
-- and one that were could attach any trigger of its own). An id never changes. The check
-- is the trigger's WHEN, run for each row without a call; the function only says no. A
-- row given an id in a session that drew none is refused by currval itself ("not yet
-- defined in this session").
CREATE OR REPLACE FUNCTION :"schema".pqjobs_job_entry_check() RETURNS trigger
LANGUAGE plpgsql VOLATILE
SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        RAISE EXCEPTION 'pqjobs_job: a job''s id never changes (job % would become %)',
            OLD.id, NEW.id USING ERRCODE = 'insufficient_privilege';
    END IF;
    RAISE EXCEPTION 'pqjobs_job: a new job takes the id its sequence draws, in the hot table '
        '(this row came with id % for shelf %); a job changes shelf only through the '
        'history functions, with the owner''s rights', NEW.id,
        quote_literal(NEW.shelf) USING ERRCODE = 'insufficient_privilege';
END
$$;

DROP TRIGGER IF EXISTS pqjobs_job_entry ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_entry
BEFORE INSERT ON :"schema".pqjobs_job
FOR EACH ROW
WHEN (NOT pg_catalog.has_table_privilege(':"schema".pqjobs_job'::regclass, 'TRIGGER')
      AND NOT (NEW.shelf = 'hot'
               AND NEW.id = pg_catalog.currval(':"schema".pqjobs_job_id_seq'::regclass)))
EXECUTE FUNCTION :"schema".pqjobs_job_entry_check();

DROP TRIGGER IF EXISTS pqjobs_job_same_id ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_same_id
BEFORE UPDATE OF id ON :"schema".pqjobs_job
FOR EACH ROW
WHEN (OLD.id IS DISTINCT FROM NEW.id)
EXECUTE FUNCTION :"schema".pqjobs_job_entry_check();
