"""Operations: trace context on jobs, the claim loop's liveness, outcome counters.

- ``pqjobs_job.trace_context``: the W3C trace context of the span that enqueued the job
  (NULL when tracing is not in use). A nullable column without a default: adding it only
  changes the catalog, whatever the size of the table.
- ``pqjobs_worker.loop_at``: when the worker's claim loop last ran (health checks).
- ``pqjobs_outcome_count`` and ``pqjobs_duration_bucket``: counters of recorded attempts
  per job type, queue and outcome, and the runtime histogram; workers add to them every
  ``STATS_INTERVAL`` (Prometheus metrics read them).
- ``pqjobs_enqueue()`` takes the trace context as its 13th argument, before the
  flow-control ones of migration 0009. Every argument after the 12th defaults to NULL, so a
  process of an earlier release keeps enqueueing during a rolling deploy; there is still one
  function of that name.
"""

import importlib

import django.db.models.functions.datetime
from django.db import migrations, models

previous = importlib.import_module("django_pqjobs.migrations.0009_flow_control")

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
    p_notify_channel text,
    p_trace_context jsonb DEFAULT NULL,
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
            trace_context, created_at, updated_at, concurrency_key, concurrency_limit,
            rate_key, rate_limit, rate_period
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts,
            COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds),
            p_timeout_seconds, NULL, p_parent_id, p_schedule_id, '', '', p_trace_context,
            now(), now(), p_concurrency_key, p_concurrency_limit, p_rate_key, p_rate_limit,
            p_rate_period
        )
        RETURNING id INTO new_id;
    ELSE
        INSERT INTO pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, dedupe_key, parent_id, schedule_id, last_error, error_type,
            trace_context, created_at, updated_at, concurrency_key, concurrency_limit,
            rate_key, rate_limit, rate_period
        ) VALUES (
            p_job_type, p_queue, p_payload, 'ready', p_priority, 0, p_max_attempts,
            COALESCE(p_run_at, now()) + make_interval(secs => p_delay_seconds),
            p_timeout_seconds, p_dedupe_key, p_parent_id, p_schedule_id, '', '',
            p_trace_context, now(), now(), p_concurrency_key, p_concurrency_limit,
            p_rate_key, p_rate_limit, p_rate_period
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

DROP = (
    "DROP FUNCTION IF EXISTS pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz, "
    "double precision, double precision, text, bigint, bigint, text, jsonb, text, integer, "
    "text, integer, double precision)"
)
DROP_PREVIOUS = (
    "DROP FUNCTION pqjobs_enqueue(text, text, jsonb, integer, integer, timestamptz, "
    "double precision, double precision, text, bigint, bigint, text, text, integer, text, "
    "integer, double precision)"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0009_flow_control"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="trace_context",
            field=models.JSONField(blank=True, editable=False, null=True),
        ),
        migrations.AddField(
            model_name="workerrecord",
            name="loop_at",
            field=models.DateTimeField(
                blank=True,
                help_text="When the claim loop last ran: claimed, looked for work, or waited "
                "for a free executor. A worker that heartbeats but whose loop stopped claims "
                "nothing.",
                null=True,
            ),
        ),
        migrations.CreateModel(
            name="OutcomeCount",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job_type", models.CharField(max_length=200)),
                ("queue", models.CharField(max_length=100)),
                ("outcome", models.CharField(max_length=16)),
                ("count", models.BigIntegerField(default=0)),
                (
                    "duration_ms",
                    models.BigIntegerField(default=0, help_text="Sum of the attempts' durations."),
                ),
                (
                    "updated_at",
                    models.DateTimeField(
                        db_default=django.db.models.functions.datetime.Now()
                    ),
                ),
            ],
            options={
                "db_table": "pqjobs_outcome_count",
                "ordering": ["job_type", "queue", "outcome"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job_type", "queue", "outcome"), name="pqjobs_outcome_count_key"
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="DurationBucket",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("job_type", models.CharField(max_length=200)),
                ("queue", models.CharField(max_length=100)),
                (
                    "le",
                    models.FloatField(
                        help_text="Upper bound in seconds (infinity for the last bucket)."
                    ),
                ),
                ("count", models.BigIntegerField(default=0)),
            ],
            options={
                "db_table": "pqjobs_duration_bucket",
                "ordering": ["job_type", "queue", "le"],
                "constraints": [
                    models.UniqueConstraint(
                        fields=("job_type", "queue", "le"), name="pqjobs_duration_bucket_key"
                    )
                ],
            },
        ),
        migrations.RunSQL(
            [DROP_PREVIOUS, CREATE],
            reverse_sql=[DROP, previous.CREATE_ENQUEUE],
        ),
    ]
