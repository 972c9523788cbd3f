"""Migrations 0001-0025 in one, for a fresh database: the schema they build, as
one frozen SQL file (``django_pqjobs/sql/migrations/0001_squashed_0025_fair_claiming.up.sql``),
and the model state they leave. Written by ``scripts/squash_migrations.py generate``; never
edit it.

A database that has some of them applied goes on through them (Django uses a squash only
where all or none of what it replaces is applied); migrating back to one of them reloads the
graph without the squash. Migrations after 0025 depend on 0025_fair_claiming, which
Django maps to this one. See docs/architecture.md, "Migrations and the squash".
"""

from typing import Any

import django.core.serializers.json
import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from django_pqjobs import sql


def forward(apps: Any, schema_editor: Any) -> None:
    """The up file, for the schema Django creates tables in (no table of ours exists yet)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT quote_ident(current_schema())")
        schema = cursor.fetchone()[0]
        cursor.execute(
            sql.render(sql.read("migrations/0001_squashed_0025_fair_claiming.up.sql"), schema)
        )


def backward(apps: Any, schema_editor: Any) -> None:
    """The down file: drops every table and function of ours."""
    with schema_editor.connection.cursor() as cursor:
        sql.run(cursor, "migrations/0001_squashed_0025_fair_claiming.down.sql")


class Migration(migrations.Migration):
    initial = True

    replaces = [
        ("django_pqjobs", "0001_initial"),
        ("django_pqjobs", "0002_schedules"),
        ("django_pqjobs", "0003_attempt_outcomes_for_isolation"),
        ("django_pqjobs", "0004_admin_indexes"),
        ("django_pqjobs", "0005_admin_partial_indexes"),
        ("django_pqjobs", "0006_job_table_autovacuum"),
        ("django_pqjobs", "0007_enqueue_function"),
        ("django_pqjobs", "0008_job_started_at"),
        ("django_pqjobs", "0009_flow_control"),
        ("django_pqjobs", "0010_operations"),
        ("django_pqjobs", "0011_notify_only_listeners"),
        ("django_pqjobs", "0012_operator_audit"),
        ("django_pqjobs", "0013_composition"),
        ("django_pqjobs", "0014_claim_function"),
        ("django_pqjobs", "0015_note_changes_any_size"),
        ("django_pqjobs", "0016_trust_boundary"),
        ("django_pqjobs", "0017_enqueue_checks"),
        ("django_pqjobs", "0018_attempt_snoozed"),
        ("django_pqjobs", "0019_one_flow_control_claim"),
        ("django_pqjobs", "0020_unique_jobs"),
        ("django_pqjobs", "0021_live_concurrency"),
        ("django_pqjobs", "0022_deadlines_and_sequences"),
        ("django_pqjobs", "0023_payload_versions_and_protected_types"),
        ("django_pqjobs", "0024_durable_workflows"),
        ("django_pqjobs", "0025_fair_claiming"),
    ]

    dependencies = []

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward)],
            state_operations=[
                migrations.CreateModel(
                    name="Batch",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        (
                            "label",
                            models.CharField(blank=True, db_default="", default="", max_length=200),
                        ),
                        ("callbacks", models.JSONField(blank=True, default=dict)),
                        (
                            "sealed",
                            models.BooleanField(
                                db_default=False,
                                default=False,
                                help_text="All members are in: callbacks may fire once none is active.",
                            ),
                        ),
                        ("total", models.IntegerField(db_default=0, default=0)),
                        (
                            "pending",
                            models.IntegerField(
                                db_default=0, default=0, help_text="Members not finished."
                            ),
                        ),
                        ("done", models.IntegerField(db_default=0, default=0)),
                        ("failed", models.IntegerField(db_default=0, default=0)),
                        (
                            "cancelled",
                            models.IntegerField(
                                db_default=0,
                                default=0,
                                help_text="Members cancelled, or deleted before they finished.",
                            ),
                        ),
                        (
                            "finishes",
                            models.IntegerField(
                                db_default=0,
                                default=0,
                                help_text="How many times it finished (Retry reopens it).",
                            ),
                        ),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                    ],
                    options={
                        "verbose_name_plural": "batches",
                        "db_table": "pqjobs_batch",
                        "ordering": ["-id"],
                    },
                ),
                migrations.CreateModel(
                    name="KeySlots",
                    fields=[
                        (
                            "key",
                            models.CharField(max_length=255, primary_key=True, serialize=False),
                        ),
                        ("running", models.IntegerField(db_default=0, default=0)),
                        ("last_grant", models.IntegerField(db_default=0, default=0)),
                    ],
                    options={
                        "verbose_name": "concurrency key",
                        "db_table": "pqjobs_key_slot",
                    },
                ),
                migrations.CreateModel(
                    name="ProtectedType",
                    fields=[
                        (
                            "job_type",
                            models.CharField(max_length=200, primary_key=True, serialize=False),
                        ),
                        ("fields", models.JSONField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "pqjobs_protected_type",
                        "ordering": ["job_type"],
                    },
                ),
                migrations.CreateModel(
                    name="RateBucket",
                    fields=[
                        (
                            "key",
                            models.CharField(max_length=255, primary_key=True, serialize=False),
                        ),
                        ("allowance", models.IntegerField()),
                        ("period", models.FloatField()),
                        ("window_start", models.DateTimeField(blank=True, null=True)),
                        ("used", models.IntegerField(db_default=0, default=0)),
                        ("last_grant", models.IntegerField(db_default=0, default=0)),
                    ],
                    options={
                        "db_table": "pqjobs_rate",
                    },
                ),
                migrations.CreateModel(
                    name="SequenceTail",
                    fields=[
                        (
                            "key",
                            models.CharField(max_length=255, primary_key=True, serialize=False),
                        ),
                        ("last_job_id", models.BigIntegerField(blank=True, null=True)),
                    ],
                    options={
                        "db_table": "pqjobs_sequence",
                        "ordering": ["key"],
                    },
                ),
                migrations.CreateModel(
                    name="WorkerRecord",
                    fields=[
                        (
                            "worker_id",
                            models.CharField(max_length=200, primary_key=True, serialize=False),
                        ),
                        ("hostname", models.CharField(blank=True, default="", max_length=255)),
                        ("pid", models.IntegerField(blank=True, null=True)),
                        (
                            "queues",
                            models.JSONField(
                                blank=True, help_text="null means every queue", null=True
                            ),
                        ),
                        ("concurrency", models.IntegerField(default=1)),
                        (
                            "started_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "heartbeat_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "loop_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="When the claim loop last ran: claimed, looked for work, or waited for a free executor. A worker that heartbeats but whose loop stopped claims nothing.",
                                null=True,
                            ),
                        ),
                        (
                            "listening",
                            models.BooleanField(
                                db_default=False,
                                default=False,
                                help_text="Whether its listener LISTENs now; enqueues send NOTIFY only while some worker does.",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pqjobs_worker",
                        "ordering": ["worker_id"],
                    },
                ),
                migrations.CreateModel(
                    name="ConcurrencySetting",
                    fields=[
                        (
                            "name",
                            models.CharField(max_length=200, primary_key=True, serialize=False),
                        ),
                        ("concurrency", models.PositiveIntegerField()),
                        (
                            "set_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "set_by",
                            models.CharField(blank=True, db_default="", default="", max_length=150),
                        ),
                    ],
                    options={
                        "verbose_name": "worker concurrency",
                        "verbose_name_plural": "worker concurrency",
                        "db_table": "pqjobs_concurrency",
                        "ordering": ["name"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("concurrency__gte", 1)),
                                name="pqjobs_concurrency_positive",
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
                                fields=("job_type", "queue", "le"),
                                name="pqjobs_duration_bucket_key",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="FairWeight",
                    fields=[
                        (
                            "key",
                            models.CharField(max_length=255, primary_key=True, serialize=False),
                        ),
                        (
                            "weight",
                            models.PositiveSmallIntegerField(
                                help_text="From 1 to 1000: turns taken for each turn of a key weighing 1."
                            ),
                        ),
                        (
                            "set_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "set_by",
                            models.CharField(blank=True, db_default="", default="", max_length=150),
                        ),
                    ],
                    options={
                        "verbose_name": "fair key weight",
                        "db_table": "pqjobs_fair_weight",
                        "ordering": ["key"],
                        "constraints": [
                            models.CheckConstraint(
                                condition=models.Q(("weight__gte", 1), ("weight__lte", 1000)),
                                name="pqjobs_fair_weight_range",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Job",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("job_type", models.CharField(max_length=200)),
                        (
                            "queue",
                            models.CharField(
                                db_default="default", default="default", max_length=100
                            ),
                        ),
                        (
                            "payload",
                            models.JSONField(
                                default=dict, encoder=django.core.serializers.json.DjangoJSONEncoder
                            ),
                        ),
                        (
                            "status",
                            models.CharField(
                                choices=[
                                    ("waiting", "Waiting"),
                                    ("ready", "Ready"),
                                    ("blocked", "Blocked"),
                                    ("running", "Running"),
                                    ("done", "Done"),
                                    ("failed", "Failed"),
                                    ("cancelled", "Cancelled"),
                                    ("expired", "Expired"),
                                ],
                                db_default="ready",
                                default="ready",
                                max_length=16,
                            ),
                        ),
                        (
                            "priority",
                            models.IntegerField(
                                db_default=0, default=0, help_text="Higher runs first."
                            ),
                        ),
                        ("attempts", models.IntegerField(db_default=0, default=0)),
                        ("max_attempts", models.IntegerField(db_default=5, default=5)),
                        (
                            "run_after",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("timeout_seconds", models.FloatField(blank=True, null=True)),
                        ("locked_at", models.DateTimeField(blank=True, null=True)),
                        ("locked_by", models.CharField(blank=True, max_length=200, null=True)),
                        ("heartbeat_at", models.DateTimeField(blank=True, null=True)),
                        ("dedupe_key", models.CharField(blank=True, max_length=255, null=True)),
                        ("last_error", models.TextField(blank=True, db_default="", default="")),
                        (
                            "error_type",
                            models.CharField(blank=True, db_default="", default="", max_length=200),
                        ),
                        (
                            "result",
                            models.JSONField(
                                blank=True,
                                encoder=django.core.serializers.json.DjangoJSONEncoder,
                                null=True,
                            ),
                        ),
                        ("finished_at", models.DateTimeField(blank=True, null=True)),
                        ("duration_ms", models.BigIntegerField(blank=True, null=True)),
                        ("progress", models.JSONField(blank=True, null=True)),
                        ("cancel_requested_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "updated_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "started_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="When a handler last started (recorded just after it starts). A rescued job whose current attempt never started gets that attempt back.",
                                null=True,
                            ),
                        ),
                        (
                            "blocked_by",
                            models.CharField(
                                blank=True,
                                help_text="limit, rate or paused",
                                max_length=16,
                                null=True,
                            ),
                        ),
                        (
                            "concurrency_key",
                            models.CharField(blank=True, max_length=255, null=True),
                        ),
                        ("concurrency_limit", models.IntegerField(blank=True, null=True)),
                        ("rate_key", models.CharField(blank=True, max_length=255, null=True)),
                        ("rate_limit", models.IntegerField(blank=True, null=True)),
                        ("rate_period", models.FloatField(blank=True, null=True)),
                        ("trace_context", models.JSONField(blank=True, editable=False, null=True)),
                        (
                            "retried_from",
                            models.IntegerField(
                                db_default=0,
                                default=0,
                                help_text="Attempts made before the last operator Retry: the backoff counts attempts from there, and the next Retry grants as many as this round had.",
                            ),
                        ),
                        (
                            "has_dependents",
                            models.BooleanField(
                                db_default=False,
                                default=False,
                                help_text="Some job waits for this one.",
                            ),
                        ),
                        (
                            "on_dependency_failure",
                            models.CharField(
                                db_default="cancel",
                                default="cancel",
                                help_text="When a dependency fails for good: cancel this job, run it anyway, or halt (wait until the dependency is retried or skipped).",
                                max_length=8,
                            ),
                        ),
                        (
                            "waited_on",
                            models.BooleanField(
                                db_default=False,
                                default=False,
                                help_text="Someone called wait_for() on this job: its finish is announced.",
                            ),
                        ),
                        (
                            "waiting_for",
                            models.IntegerField(
                                db_default=0, default=0, help_text="Dependencies not finished yet."
                            ),
                        ),
                        (
                            "unique_until",
                            models.DateTimeField(
                                blank=True,
                                help_text="The end of the unique_for window the job was enqueued in: its key is held until then (whatever its status, as unique_states say). Empty: no window.",
                                null=True,
                            ),
                        ),
                        (
                            "unique_states",
                            models.PositiveSmallIntegerField(
                                db_default=0,
                                default=0,
                                help_text="The finished statuses in which the job still holds its dedupe key, as a mask: 1 done, 2 failed, 4 cancelled (it always holds it while ready, blocked or running).",
                            ),
                        ),
                        (
                            "expires_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="The deadline: no attempt starts after it; a job not started by then ends expired. Empty: none.",
                                null=True,
                            ),
                        ),
                        (
                            "sequence_key",
                            models.CharField(
                                blank=True,
                                help_text="The sequence the job belongs to: jobs of one sequence run one at a time, in enqueue order (each waits for the one before it).",
                                max_length=255,
                                null=True,
                            ),
                        ),
                        (
                            "payload_version",
                            models.PositiveSmallIntegerField(
                                blank=True,
                                help_text="The version of its job type's payload shape the payload was written for (@job(version=N)); empty: 1. An older one is upgraded before the handler runs.",
                                null=True,
                            ),
                        ),
                        (
                            "fair_key",
                            models.CharField(
                                blank=True,
                                help_text="The key workers share out by (@job(fair_key=...)): among due jobs of equal priority, keys take turns, weighted by pqjobs_fair_weight.",
                                max_length=255,
                                null=True,
                            ),
                        ),
                        (
                            "fair_turn",
                            models.FloatField(
                                blank=True,
                                help_text="The job's place in its key's turns, given at enqueue (the trigger pqjobs_job_fair_turn); empty once claimed, or for jobs not due when enqueued.",
                                null=True,
                            ),
                        ),
                        (
                            "batch",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                db_index=False,
                                help_text="The batch this job is a member of.",
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="members",
                                to="django_pqjobs.batch",
                            ),
                        ),
                        (
                            "callback_of",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                db_index=False,
                                help_text="The batch whose finish enqueued this job (a callback).",
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="callback_jobs",
                                to="django_pqjobs.batch",
                            ),
                        ),
                        (
                            "parent",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                db_index=False,
                                help_text="The job whose handler enqueued this one.",
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="children",
                                to="django_pqjobs.job",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pqjobs_job",
                        "ordering": ["-id"],
                        "permissions": [
                            (
                                "view_job_secrets",
                                "Can see secrets in job data (fields PQJOBS['REDACTED_FIELDS'] names, encrypted payloads and results)",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="OperatorAction",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        (
                            "at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        ("actor", models.CharField(help_text="Who did it.", max_length=150)),
                        (
                            "action",
                            models.CharField(
                                choices=[
                                    ("retry", "Retry"),
                                    ("cancel", "Cancel"),
                                    ("run_now", "Run now"),
                                    ("release", "Release"),
                                    ("delete", "Delete"),
                                    ("pause", "Pause"),
                                    ("resume", "Resume"),
                                    ("schedule_enable", "Enable schedule"),
                                    ("schedule_disable", "Disable schedule"),
                                    ("schedule_run_now", "Run schedule now"),
                                    ("concurrency", "Set worker concurrency"),
                                    ("skip", "Skip (a halted sequence goes on)"),
                                    ("end_wait", "End a workflow's wait"),
                                    ("signal", "Send a signal"),
                                    ("fair_weight", "Set a fair key's weight"),
                                ],
                                max_length=32,
                            ),
                        ),
                        (
                            "job_id",
                            models.BigIntegerField(
                                blank=True, help_text="The job acted on.", null=True
                            ),
                        ),
                        (
                            "schedule_id",
                            models.BigIntegerField(
                                blank=True, help_text="The schedule acted on.", null=True
                            ),
                        ),
                        (
                            "target",
                            models.CharField(
                                blank=True,
                                default="",
                                help_text="The job's type, the queue or job type paused, or the schedule's name.",
                                max_length=200,
                            ),
                        ),
                        (
                            "detail",
                            models.TextField(blank=True, default="", help_text="What it changed."),
                        ),
                    ],
                    options={
                        "verbose_name": "operator action",
                        "db_table": "pqjobs_audit",
                        "ordering": ["-id"],
                        "indexes": [
                            models.Index(
                                models.F("job_id"),
                                models.OrderBy(models.F("id"), descending=True),
                                condition=models.Q(("job_id__isnull", False)),
                                name="pqjobs_audit_job",
                            ),
                            models.Index(
                                models.F("schedule_id"),
                                models.OrderBy(models.F("id"), descending=True),
                                condition=models.Q(("schedule_id__isnull", False)),
                                name="pqjobs_audit_schedule",
                            ),
                            models.Index(
                                models.F("actor"),
                                models.OrderBy(models.F("id"), descending=True),
                                name="pqjobs_audit_actor",
                            ),
                            models.Index(models.F("at"), name="pqjobs_audit_at"),
                        ],
                    },
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
                            models.BigIntegerField(
                                default=0, help_text="Sum of the attempts' durations."
                            ),
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
                                fields=("job_type", "queue", "outcome"),
                                name="pqjobs_outcome_count_key",
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Pause",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        (
                            "kind",
                            models.CharField(
                                choices=[("queue", "Queue"), ("job_type", "Job type")],
                                max_length=16,
                            ),
                        ),
                        ("name", models.CharField(max_length=200)),
                        (
                            "paused_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "paused_by",
                            models.CharField(blank=True, db_default="", default="", max_length=150),
                        ),
                    ],
                    options={
                        "db_table": "pqjobs_pause",
                        "ordering": ["kind", "name"],
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("kind", "name"), name="pqjobs_pause_unique"
                            ),
                            models.CheckConstraint(
                                condition=models.Q(("kind__in", ["queue", "job_type"])),
                                name="pqjobs_pause_kind_valid",
                            ),
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="Schedule",
                    fields=[
                        (
                            "id",
                            models.BigAutoField(
                                auto_created=True,
                                primary_key=True,
                                serialize=False,
                                verbose_name="ID",
                            ),
                        ),
                        ("name", models.CharField(max_length=200, unique=True)),
                        ("job_type", models.CharField(max_length=200)),
                        (
                            "payload",
                            models.JSONField(
                                blank=True,
                                default=dict,
                                encoder=django.core.serializers.json.DjangoJSONEncoder,
                            ),
                        ),
                        (
                            "queue",
                            models.CharField(
                                blank=True,
                                default="",
                                help_text="Blank: the job type's queue.",
                                max_length=100,
                            ),
                        ),
                        (
                            "priority",
                            models.IntegerField(
                                blank=True,
                                help_text="Blank: the job type's priority. Higher runs first.",
                                null=True,
                            ),
                        ),
                        (
                            "cron",
                            models.CharField(
                                blank=True,
                                default="",
                                help_text="5 fields (minute hour day month weekday), or 6 with seconds last.",
                                max_length=200,
                            ),
                        ),
                        (
                            "interval_seconds",
                            models.FloatField(
                                blank=True,
                                help_text="Run every N seconds (instead of cron).",
                                null=True,
                            ),
                        ),
                        (
                            "timezone",
                            models.CharField(
                                default="UTC",
                                help_text="IANA name the cron fields are read in.",
                                max_length=64,
                            ),
                        ),
                        ("enabled", models.BooleanField(default=True)),
                        (
                            "overlap",
                            models.CharField(
                                choices=[
                                    (
                                        "skip",
                                        "Skip a run while the previous one is ready or running",
                                    ),
                                    ("allow", "Allow overlapping runs"),
                                ],
                                default="skip",
                                max_length=16,
                            ),
                        ),
                        (
                            "misfire",
                            models.CharField(
                                choices=[
                                    ("run_once", "Run once now, then resume the schedule"),
                                    ("skip", "Skip missed runs; wait for the next one"),
                                ],
                                default="run_once",
                                max_length=16,
                            ),
                        ),
                        ("next_run_at", models.DateTimeField(blank=True, null=True)),
                        ("last_run_at", models.DateTimeField(blank=True, null=True)),
                        ("declared", models.JSONField(blank=True, editable=False, null=True)),
                        (
                            "created_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "updated_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "last_job",
                            models.ForeignKey(
                                blank=True,
                                db_constraint=False,
                                help_text="May point to a pruned job.",
                                null=True,
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="+",
                                to="django_pqjobs.job",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pqjobs_schedule",
                        "ordering": ["name"],
                    },
                ),
                migrations.AddField(
                    model_name="job",
                    name="schedule",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        help_text="The schedule that enqueued this job, if any.",
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="jobs",
                        to="django_pqjobs.schedule",
                    ),
                ),
                migrations.CreateModel(
                    name="Signal",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=200)),
                        (
                            "payload",
                            models.JSONField(
                                blank=True,
                                encoder=django.core.serializers.json.DjangoJSONEncoder,
                                null=True,
                            ),
                        ),
                        (
                            "sent_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "job",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="signals",
                                to="django_pqjobs.job",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pqjobs_signal",
                        "ordering": ["job", "id"],
                    },
                ),
                migrations.CreateModel(
                    name="Step",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("name", models.CharField(max_length=200)),
                        (
                            "kind",
                            models.CharField(
                                choices=[
                                    ("step", "Step"),
                                    ("sleep", "Durable sleep"),
                                    ("signal", "Wait for a signal"),
                                    ("child", "Wait for a child job"),
                                ],
                                max_length=8,
                            ),
                        ),
                        (
                            "result",
                            models.JSONField(
                                blank=True,
                                encoder=django.core.serializers.json.DjangoJSONEncoder,
                                null=True,
                            ),
                        ),
                        ("attempt", models.IntegerField(help_text="The attempt that ran it.")),
                        (
                            "started_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "finished_at",
                            models.DateTimeField(
                                blank=True, help_text="Empty: a wait not over yet.", null=True
                            ),
                        ),
                        (
                            "wake_at",
                            models.DateTimeField(
                                blank=True,
                                help_text="When a sleep ends, or a wait for a signal times out.",
                                null=True,
                            ),
                        ),
                        (
                            "job",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="steps",
                                to="django_pqjobs.job",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pqjobs_step",
                        "ordering": ["job", "id"],
                    },
                ),
                migrations.CreateModel(
                    name="Dependency",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        (
                            "depends_on",
                            models.ForeignKey(
                                db_constraint=False,
                                help_text="The job it waits for.",
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="dependent_edges",
                                to="django_pqjobs.job",
                            ),
                        ),
                        (
                            "job",
                            models.ForeignKey(
                                db_constraint=False,
                                db_index=False,
                                help_text="The dependent job.",
                                on_delete=django.db.models.deletion.DO_NOTHING,
                                related_name="dependency_edges",
                                to="django_pqjobs.job",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pqjobs_dependency",
                        "constraints": [
                            models.UniqueConstraint(
                                fields=("job", "depends_on"), name="pqjobs_dependency_unique"
                            )
                        ],
                    },
                ),
                migrations.CreateModel(
                    name="JobAttempt",
                    fields=[
                        ("id", models.BigAutoField(primary_key=True, serialize=False)),
                        ("attempt", models.IntegerField()),
                        ("worker_id", models.CharField(blank=True, default="", max_length=200)),
                        ("started_at", models.DateTimeField(blank=True, null=True)),
                        (
                            "finished_at",
                            models.DateTimeField(
                                db_default=django.db.models.functions.datetime.Now()
                            ),
                        ),
                        (
                            "outcome",
                            models.CharField(
                                choices=[
                                    ("error", "Error (retryable)"),
                                    ("permanent", "Permanent error"),
                                    ("timeout", "Timed out"),
                                    ("unknown_type", "No handler registered"),
                                    ("lost", "Worker lost (rescued)"),
                                    ("released", "Released (the attempt was given back)"),
                                    ("snoozed", "Snoozed (not charged)"),
                                    (
                                        "parked",
                                        "Parked (a durable sleep or a wait for a signal; not charged)",
                                    ),
                                    ("cancelled", "Cancelled while running"),
                                    ("killed", "Process killed (likely out of memory)"),
                                    ("crashed", "Process crashed (signal)"),
                                    ("exited", "Process exited early"),
                                ],
                                max_length=16,
                            ),
                        ),
                        ("error_type", models.CharField(blank=True, default="", max_length=200)),
                        ("traceback", models.TextField(blank=True, default="")),
                        (
                            "job",
                            models.ForeignKey(
                                on_delete=django.db.models.deletion.CASCADE,
                                related_name="failed_attempts",
                                to="django_pqjobs.job",
                            ),
                        ),
                    ],
                    options={
                        "db_table": "pqjobs_attempt",
                        "ordering": ["job_id", "attempt", "id"],
                        "indexes": [
                            models.Index(models.F("finished_at"), name="pqjobs_attempt_finished")
                        ],
                    },
                ),
                migrations.AddIndex(
                    model_name="schedule",
                    index=models.Index(
                        condition=models.Q(("enabled", True)),
                        fields=["next_run_at"],
                        name="pqjobs_schedule_due",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="schedule",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            models.Q(("cron", ""), ("interval_seconds__gt", 0)),
                            models.Q(
                                models.Q(("cron", ""), _negated=True),
                                ("interval_seconds__isnull", True),
                            ),
                            _connector="OR",
                        ),
                        name="pqjobs_schedule_cron_xor_interval",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="schedule",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("overlap__in", ["skip", "allow"])),
                        name="pqjobs_schedule_overlap_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="schedule",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("misfire__in", ["run_once", "skip"])),
                        name="pqjobs_schedule_misfire_valid",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("heartbeat_at"),
                        condition=models.Q(("status", "running")),
                        name="pqjobs_job_running",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("job_type"),
                        models.OrderBy(models.F("id"), descending=True),
                        name="pqjobs_job_type_id",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("status", "failed")),
                        name="pqjobs_job_failed",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("last_error", ""), _negated=True),
                        name="pqjobs_job_has_error",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("parent"),
                        condition=models.Q(("parent__isnull", False)),
                        name="pqjobs_job_parent",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("concurrency_key"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("run_after"),
                        models.F("id"),
                        condition=models.Q(("status", "blocked")),
                        name="pqjobs_job_blocked_key",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("rate_key"),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("run_after"),
                        models.F("id"),
                        condition=models.Q(("rate_key__isnull", False), ("status", "blocked")),
                        name="pqjobs_job_blocked_rate",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("concurrency_key"),
                        condition=models.Q(
                            ("concurrency_key__isnull", False), ("status", "running")
                        ),
                        name="pqjobs_job_running_key",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.OrderBy(models.F("id"), descending=True),
                        condition=models.Q(("status", "waiting")),
                        name="pqjobs_job_waiting",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("batch"),
                        models.F("status"),
                        condition=models.Q(("batch__isnull", False)),
                        name="pqjobs_job_batch",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("callback_of"),
                        condition=models.Q(("callback_of__isnull", False)),
                        name="pqjobs_job_callback",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("finished_at"),
                        condition=models.Q(
                            ("status__in", ("done", "failed", "cancelled", "expired"))
                        ),
                        name="pqjobs_job_finished",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("expires_at"),
                        condition=models.Q(
                            ("expires_at__isnull", False),
                            ("status__in", ("waiting", "ready", "blocked")),
                        ),
                        name="pqjobs_job_expiring",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("run_after"),
                        condition=models.Q(("status", "waiting"), ("waiting_for", 0)),
                        name="pqjobs_job_parked",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.ExpressionWrapper(
                            models.Q(("fair_turn__isnull", True)),
                            output_field=models.BooleanField(),
                        ),
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("run_after"),
                        models.F("id"),
                        condition=models.Q(("status", "ready")),
                        name="pqjobs_job_claim",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.OrderBy(models.F("priority"), descending=True),
                        models.F("fair_turn"),
                        models.F("id"),
                        condition=models.Q(("fair_turn__isnull", False), ("status", "ready")),
                        name="pqjobs_job_fair_claim",
                    ),
                ),
                migrations.AddIndex(
                    model_name="job",
                    index=models.Index(
                        models.F("fair_key"),
                        models.F("priority"),
                        models.F("fair_turn"),
                        condition=models.Q(("fair_turn__isnull", False), ("status", "ready")),
                        name="pqjobs_job_fair_key",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("max_attempts__gte", 1)), name="pqjobs_job_max_attempts"
                    ),
                ),
                migrations.AddConstraint(
                    model_name="job",
                    constraint=models.CheckConstraint(
                        condition=models.Q(
                            (
                                "status__in",
                                [
                                    "waiting",
                                    "ready",
                                    "blocked",
                                    "running",
                                    "done",
                                    "failed",
                                    "cancelled",
                                    "expired",
                                ],
                            )
                        ),
                        name="pqjobs_job_status_valid",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="signal",
                    constraint=models.UniqueConstraint(
                        fields=("job", "name"), name="pqjobs_signal_job_name"
                    ),
                ),
                migrations.AddIndex(
                    model_name="step",
                    index=models.Index(
                        models.F("job"),
                        condition=models.Q(("finished_at__isnull", True), ("kind", "child")),
                        name="pqjobs_step_open_child",
                    ),
                ),
                migrations.AddConstraint(
                    model_name="step",
                    constraint=models.UniqueConstraint(
                        fields=("job", "name"), name="pqjobs_step_job_name"
                    ),
                ),
            ],
        ),
    ]
