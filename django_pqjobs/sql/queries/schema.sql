-- The statements of schema.py, each under its name (loaded once, at import).

-- name: missing_migrations
SELECT CASE WHEN to_regclass('django_migrations') IS NOT NULL THEN has_table_privilege('django_migrations', 'SELECT') END

-- name: writable_by_everyone
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass('pqjobs_job') AND has_schema_privilege('public', n.oid, 'CREATE')

-- name: squatted
WITH ours AS (
    SELECT c.relnamespace AS home, c.relowner AS owner FROM pg_class c
    WHERE c.oid = to_regclass('pqjobs_job')
), named AS (
    SELECT c.relname AS name, c.relowner AS owner, c.oid FROM pg_class c, ours
    WHERE c.relnamespace = ours.home
    UNION ALL
    SELECT t.typname, t.typowner, NULL FROM pg_type t, ours
    WHERE t.typnamespace = ours.home AND t.typrelid = 0
)
SELECT n.name, pg_get_userbyid(n.owner) FROM named n, ours
WHERE n.name ~ '^pqjobs_(job|attempt)_(done|failed|cancelled|expired)_[0-9]{8}_[0-9]{1,2}$'
  AND (n.owner <> ours.owner OR NOT EXISTS (
      SELECT 1 FROM pg_inherits i WHERE i.inhrelid = n.oid
        AND i.inhparent IN (to_regclass('pqjobs_job'), to_regclass('pqjobs_attempt'))))
ORDER BY 1
