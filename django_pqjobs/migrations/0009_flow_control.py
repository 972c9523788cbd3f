"""Flow control: concurrency limits per key, rate limits, pause and resume.

- Jobs get their flow-control columns, and the status ``blocked`` (in the status CHECK and
  among the active statuses of the dedupe index: a blocked job is waiting, not finished).
- ``pqjobs_key_slot`` counts the running jobs of each concurrency key; ``pqjobs_rate``
  counts the starts of each rate bucket in its current window; ``pqjobs_pause`` lists the
  paused queues and job types.
- Two triggers keep the slot counts right however a job leaves ``running`` (completion,
  failure, retry, release, rescue, an operator's delete): they give the slot back and
  promote the next job blocked on that key. A third creates the slot and rate rows when a
  job that has them is inserted, so the claim finds them. Their functions run with the
  rights of the role that ran the migration (SECURITY DEFINER, with the search_path of
  that moment), so roles with least privilege need no grants for what they do.
- ``pqjobs_enqueue()`` takes the new columns (a new argument list; the old one is dropped).

Recreating the dedupe index locks the job table against writes for as long as building the
index takes (a second or two per million rows).
"""

import importlib

from django.db import migrations, models
import django.db.models.functions.datetime

migrations_0007 = importlib.import_module("django_pqjobs.migrations.0007_enqueue_function")

FLOW_SQL = """
CREATE FUNCTION pqjobs_flow_slot_freed() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    promoted RECORD;
BEGIN
    UPDATE pqjobs_key_slot SET running = greatest(running - 1, 0)
    WHERE key = OLD.concurrency_key;
    UPDATE pqjobs_job SET status = 'ready', blocked_by = NULL, updated_at = now()
    WHERE id = (
        SELECT id FROM pqjobs_job
        WHERE status = 'blocked' AND blocked_by = 'limit'
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

CREATE TRIGGER pqjobs_job_left_running
AFTER UPDATE OF status ON pqjobs_job
FOR EACH ROW
WHEN (OLD.status = 'running' AND NEW.status <> 'running' AND OLD.concurrency_key IS NOT NULL)
EXECUTE FUNCTION pqjobs_flow_slot_freed();

CREATE TRIGGER pqjobs_job_deleted_running
AFTER DELETE ON pqjobs_job
FOR EACH ROW
WHEN (OLD.status = 'running' AND OLD.concurrency_key IS NOT NULL)
EXECUTE FUNCTION pqjobs_flow_slot_freed();

CREATE FUNCTION pqjobs_flow_rows() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
BEGIN
    IF NEW.concurrency_key IS NOT NULL THEN
        INSERT INTO pqjobs_key_slot (key, running, last_grant)
        VALUES (NEW.concurrency_key, 0, 0) ON CONFLICT DO NOTHING;
    END IF;
    IF NEW.rate_key IS NOT NULL THEN
        INSERT INTO pqjobs_rate (key, allowance, period, used, last_grant)
        VALUES (NEW.rate_key, NEW.rate_limit, NEW.rate_period, 0, 0) ON CONFLICT DO NOTHING;
        -- a declaration that changed takes effect with the next job enqueued
        UPDATE pqjobs_rate SET allowance = NEW.rate_limit, period = NEW.rate_period
        WHERE key = NEW.rate_key
          AND (allowance, period) IS DISTINCT FROM (NEW.rate_limit, NEW.rate_period);
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER pqjobs_job_flow_rows
AFTER INSERT ON pqjobs_job
FOR EACH ROW
WHEN (NEW.concurrency_key IS NOT NULL OR NEW.rate_key IS NOT NULL)
EXECUTE FUNCTION pqjobs_flow_rows();

DROP FUNCTION pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz,
    double precision, double precision, text, bigint, bigint, text);
"""

CREATE_ENQUEUE = """
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
    p_notify_channel text,
    p_concurrency_key text DEFAULT NULL,
    p_concurrency_limit integer DEFAULT NULL,
    p_rate_key text DEFAULT NULL,
    p_rate_limit integer DEFAULT NULL,
    p_rate_period double precision DEFAULT NULL
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
            created_at, updated_at, concurrency_key, concurrency_limit, rate_key,
            rate_limit, rate_period
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts,
            COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds),
            p_timeout_seconds, NULL, p_parent_id, p_schedule_id, '', '', now(), now(),
            p_concurrency_key, p_concurrency_limit, p_rate_key, p_rate_limit, p_rate_period
        )
        RETURNING id INTO new_id;
    ELSE
        INSERT INTO pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            created_at, updated_at, concurrency_key, concurrency_limit, rate_key,
            rate_limit, rate_period
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts,
            COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds),
            p_timeout_seconds, p_dedupe_key, p_parent_id, p_schedule_id, '', '', now(), now(),
            p_concurrency_key, p_concurrency_limit, p_rate_key, p_rate_limit, p_rate_period
        )
        ON CONFLICT (job_type, dedupe_key)
            WHERE dedupe_key IS NOT NULL AND status IN ('ready', 'blocked', 'running')
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

UNDO_FLOW_SQL = """
DROP TRIGGER pqjobs_job_flow_rows ON pqjobs_job;
DROP FUNCTION pqjobs_flow_rows();
DROP TRIGGER pqjobs_job_deleted_running ON pqjobs_job;
DROP TRIGGER pqjobs_job_left_running ON pqjobs_job;
DROP FUNCTION pqjobs_flow_slot_freed();
DROP FUNCTION pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz,
    double precision, double precision, text, bigint, bigint, text, text, integer, text,
    integer, double precision);
""" + migrations_0007.CREATE


class Migration(migrations.Migration):

    dependencies = [
        ('django_pqjobs', '0008_job_started_at'),
    ]

    operations = [
        migrations.CreateModel(
            name='KeySlots',
            fields=[
                ('key', models.CharField(max_length=255, primary_key=True, serialize=False)),
                ('running', models.IntegerField(db_default=0, default=0)),
                ('last_grant', models.IntegerField(db_default=0, default=0)),
            ],
            options={
                'verbose_name': 'concurrency key',
                'db_table': 'pqjobs_key_slot',
            },
        ),
        migrations.CreateModel(
            name='Pause',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('kind', models.CharField(choices=[('queue', 'Queue'), ('job_type', 'Job type')], max_length=16)),
                ('name', models.CharField(max_length=200)),
                ('paused_at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
                ('paused_by', models.CharField(blank=True, db_default='', default='', max_length=150)),
            ],
            options={
                'db_table': 'pqjobs_pause',
                'ordering': ['kind', 'name'],
            },
        ),
        migrations.CreateModel(
            name='RateBucket',
            fields=[
                ('key', models.CharField(max_length=255, primary_key=True, serialize=False)),
                ('allowance', models.IntegerField()),
                ('period', models.FloatField()),
                ('window_start', models.DateTimeField(blank=True, null=True)),
                ('used', models.IntegerField(db_default=0, default=0)),
                ('last_grant', models.IntegerField(db_default=0, default=0)),
            ],
            options={
                'db_table': 'pqjobs_rate',
            },
        ),
        migrations.RemoveConstraint(
            model_name='job',
            name='pqjobs_job_active_dedupe',
        ),
        migrations.RemoveConstraint(
            model_name='job',
            name='pqjobs_job_status_valid',
        ),
        migrations.AddField(
            model_name='job',
            name='blocked_by',
            field=models.CharField(blank=True, help_text='limit, rate or paused', max_length=16, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_key',
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='concurrency_limit',
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='rate_key',
            field=models.CharField(blank=True, max_length=255, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='rate_limit',
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='job',
            name='rate_period',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='job',
            name='status',
            field=models.CharField(choices=[('ready', 'Ready'), ('blocked', 'Blocked'), ('running', 'Running'), ('done', 'Done'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], db_default='ready', default='ready', max_length=16),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('concurrency_key'), models.OrderBy(models.F('priority'), descending=True), models.F('run_after'), models.F('id'), condition=models.Q(('status', 'blocked')), name='pqjobs_job_blocked_key'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('rate_key'), models.OrderBy(models.F('priority'), descending=True), models.F('run_after'), models.F('id'), condition=models.Q(('rate_key__isnull', False), ('status', 'blocked')), name='pqjobs_job_blocked_rate'),
        ),
        migrations.AddIndex(
            model_name='job',
            index=models.Index(models.F('concurrency_key'), condition=models.Q(('concurrency_key__isnull', False), ('status', 'running')), name='pqjobs_job_running_key'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.UniqueConstraint(condition=models.Q(('status__in', ('ready', 'blocked', 'running')), ('dedupe_key__isnull', False)), fields=('job_type', 'dedupe_key'), name='pqjobs_job_active_dedupe'),
        ),
        migrations.AddConstraint(
            model_name='job',
            constraint=models.CheckConstraint(condition=models.Q(('status__in', ['ready', 'blocked', 'running', 'done', 'failed', 'cancelled'])), name='pqjobs_job_status_valid'),
        ),
        migrations.AddConstraint(
            model_name='pause',
            constraint=models.UniqueConstraint(fields=('kind', 'name'), name='pqjobs_pause_unique'),
        ),
        migrations.AddConstraint(
            model_name='pause',
            constraint=models.CheckConstraint(condition=models.Q(('kind__in', ['queue', 'job_type'])), name='pqjobs_pause_kind_valid'),
        ),
        migrations.RunSQL(FLOW_SQL + CREATE_ENQUEUE, reverse_sql=UNDO_FLOW_SQL),
    ]
