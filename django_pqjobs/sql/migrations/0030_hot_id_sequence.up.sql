-- The hot tables' ids drawn from a plain sequence (issue 44): a database partitioned by
-- migration 0027 before 0027 did this itself (on PostgreSQL 15 or 16) kept the identity
-- columns Django made, which PostgreSQL 17 and later refuse on a partition (an upgrade of
-- the server by pg_upgrade or a dump and restore would carry them to a major that cannot
-- attach them). Each becomes a plain column whose default draws from a sequence of the same
-- name, owned by the column, with the value it had and the grants on it: what 0027 makes
-- now. A database that has this form already is left as it is.
--
-- The parents' defaults and pqjobs_job_entry's WHEN (schema/history.sql) name the identity
-- sequence, which DROP IDENTITY drops: they are taken off first and made again after.
DO $do$
DECLARE
    pair record;
    sequence_name text;
    last bigint;
    called boolean;
    grants text[];
    one text;
BEGIN
    FOR pair IN SELECT * FROM (VALUES
        (':"schema".pqjobs_job'::regclass, ':"schema".pqjobs_job_hot'::regclass),
        (':"schema".pqjobs_attempt'::regclass, ':"schema".pqjobs_attempt_hot'::regclass)
    ) AS t(parent, hot) LOOP
        CONTINUE WHEN NOT EXISTS (SELECT 1 FROM pg_attribute
                                  WHERE attrelid = pair.hot AND attname = 'id'
                                    AND attidentity <> '');
        sequence_name := pg_get_serial_sequence(pair.hot::text, 'id');
        EXECUTE format('SELECT last_value, is_called FROM %s', sequence_name) INTO last, called;
        SELECT coalesce(array_agg(format('GRANT %s ON SEQUENCE %s TO %s', a.privilege_type,
                                         sequence_name,
                                         CASE WHEN a.grantee = 0 THEN 'PUBLIC'
                                              ELSE quote_ident(pg_get_userbyid(a.grantee)) END)),
                        '{}')
        INTO grants
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = sequence_name::regclass AND a.grantee <> c.relowner;
        IF pair.hot = ':"schema".pqjobs_job_hot'::regclass THEN
            EXECUTE format('DROP TRIGGER IF EXISTS pqjobs_job_entry ON %s', pair.parent);
        END IF;
        EXECUTE format('ALTER TABLE ONLY %s ALTER COLUMN id DROP DEFAULT', pair.parent);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN id DROP IDENTITY', pair.hot);
        EXECUTE format('CREATE SEQUENCE %s AS bigint OWNED BY %s.id', sequence_name, pair.hot);
        PERFORM setval(sequence_name, last, called);
        EXECUTE format('ALTER TABLE %s ALTER COLUMN id SET DEFAULT nextval(%L::regclass)',
                       pair.hot, sequence_name);
        EXECUTE format('ALTER TABLE ONLY %s ALTER COLUMN id SET DEFAULT nextval(%L::regclass)',
                       pair.parent, sequence_name);
        FOREACH one IN ARRAY grants LOOP
            EXECUTE one;
        END LOOP;
    END LOOP;
END
$do$;

-- as schema/history.sql makes it (a no-op where the trigger stayed)
DROP TRIGGER IF EXISTS pqjobs_job_entry ON :"schema".pqjobs_job;
CREATE TRIGGER pqjobs_job_entry
BEFORE INSERT ON :"schema".pqjobs_job
FOR EACH ROW
WHEN (NOT pg_catalog.has_table_privilege(':"schema".pqjobs_job'::regclass, 'TRIGGER')
      AND NOT (NEW.shelf = 'hot'
               AND NEW.id = pg_catalog.currval(':"schema".pqjobs_job_id_seq'::regclass)))
EXECUTE FUNCTION :"schema".pqjobs_job_entry_check();
