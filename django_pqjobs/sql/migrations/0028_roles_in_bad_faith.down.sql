-- Back to 0027: pqjobs_history_prepare() skips a name that exists, takes any number of
-- shelves; the caller moves jobs between shelves itself, and pqjobs_job_unshelved brings a
-- returning job's attempts back with the owner's rights. (The hot partitions' privileges
-- taken back by the way up are not given back: grant them again if a role used them.)
DROP TRIGGER IF EXISTS pqjobs_job_status_guard ON :"schema".pqjobs_job;
DROP TRIGGER IF EXISTS pqjobs_job_entry ON :"schema".pqjobs_job;
DROP TRIGGER IF EXISTS pqjobs_job_same_id ON :"schema".pqjobs_job;
DROP FUNCTION IF EXISTS :"schema".pqjobs_job_status_check();
DROP FUNCTION IF EXISTS :"schema".pqjobs_job_entry_check();
DROP FUNCTION IF EXISTS :"schema".pqjobs_history_shelve(bigint[], text[]);
DROP FUNCTION IF EXISTS :"schema".pqjobs_history_unshelve(bigint[], text[]);

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
