"""``pqjobs_enqueue()``: the single-job INSERT as a PL/pgSQL function.

PostgreSQL parses and plans every statement a client sends unless the client prepares it,
and Django leaves psycopg's prepared statements off because they break behind PgBouncer
in transaction mode. For one small INSERT that planning is a fifth of the server's time.
PL/pgSQL caches the plans of the statements inside a function for the life of the server
session, invisibly to the client and to any pooler, so ``enqueue_job`` sends a trivial
``SELECT pqjobs_enqueue(...)`` and the INSERT itself is planned once per connection.

The function returns the new job's id, or NULL when ``dedupe_key`` matched an active job
(the caller then looks that job up). ``notify_channel`` NULL means no NOTIFY.
"""

from django.db import migrations

CREATE = """
CREATE FUNCTION pqjobs_enqueue(
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
    p_notify_channel text
) RETURNS bigint
LANGUAGE plpgsql
VOLATILE
AS $$
DECLARE
    new_id bigint;
BEGIN
    IF p_dedupe_key IS NULL THEN
        -- Two INSERTs on purpose: ON CONFLICT cannot be made conditional without dynamic
        -- SQL, which would lose the cached plan. Without a key no conflict is possible,
        -- so this one spares the server the arbiter-index work.
        INSERT INTO pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            created_at, updated_at
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts,
            COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds),
            p_timeout_seconds, NULL, p_parent_id, p_schedule_id, '', '', now(), now()
        )
        RETURNING id INTO new_id;
    ELSE
        INSERT INTO pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            created_at, updated_at
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts,
            COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds),
            p_timeout_seconds, p_dedupe_key, p_parent_id, p_schedule_id, '', '', now(), now()
        )
        ON CONFLICT (job_type, dedupe_key)
            WHERE dedupe_key IS NOT NULL AND status IN ('ready', 'running')
            DO NOTHING
        RETURNING id INTO new_id;
    END IF;
    IF new_id IS NOT NULL AND p_notify_channel IS NOT NULL THEN
        PERFORM pg_notify(p_notify_channel, p_queue);
    END IF;
    RETURN new_id;
END
$$;
"""

DROP = (
    "DROP FUNCTION IF EXISTS pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz, "
    "double precision, double precision, text, bigint, bigint, text)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0006_job_table_autovacuum"),
    ]

    operations = [
        migrations.RunSQL(CREATE, reverse_sql=DROP),
    ]
