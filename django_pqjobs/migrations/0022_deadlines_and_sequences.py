"""Deadlines and sequences: a job's ``expires_at`` (no attempt starts after it; the sweep
ends it ``expired``, a new final status) and ``sequence_key`` (jobs of one key run one at a
time, in enqueue order; ``pqjobs_sequence`` holds each sequence's last job), a ``halt``
dependency policy, and the Skip audit action.
``pqjobs_enqueue()`` takes the deadline, ``pqjobs_claim()`` leaves jobs past it alone and
returns the new columns, and the composition triggers know ``expired`` and ``halt``. See
``django_pqjobs/sql/migrations/0022_deadlines_and_sequences.up.sql``."""

from django.db import migrations, models

import django_pqjobs.models
from django_pqjobs import sql

STATUSES = ["waiting", "ready", "blocked", "running", "done", "failed", "cancelled", "expired"]


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0021_live_concurrency"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="expires_at",
            field=django_pqjobs.models.Timestamp(
                blank=True,
                help_text="The deadline: no attempt starts after it; a job not started by then "
                "ends expired. Empty: none.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="sequence_key",
            field=models.CharField(
                blank=True,
                help_text="The sequence the job belongs to: jobs of one sequence run one at a "
                "time, in enqueue order (each waits for the one before it).",
                max_length=255,
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="on_dependency_failure",
            field=models.CharField(
                db_default="cancel",
                default="cancel",
                help_text="When a dependency fails for good: cancel this job, run it anyway, "
                "or halt (wait until the dependency is retried or skipped).",
                max_length=8,
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("waiting", "Waiting for dependencies"),
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
        migrations.AlterField(
            model_name="operatoraction",
            name="action",
            field=models.CharField(
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
                ],
                max_length=32,
            ),
        ),
        migrations.RemoveConstraint(model_name="job", name="pqjobs_job_status_valid"),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(("status__in", STATUSES)), name="pqjobs_job_status_valid"
            ),
        ),
        migrations.RemoveIndex(model_name="job", name="pqjobs_job_finished"),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("finished_at"),
                condition=models.Q(("status__in", ("done", "failed", "cancelled", "expired"))),
                name="pqjobs_job_finished",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("expires_at"),
                condition=models.Q(
                    ("expires_at__isnull", False), ("status__in", ("waiting", "ready", "blocked"))
                ),
                name="pqjobs_job_expiring",
            ),
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
            options={"db_table": "pqjobs_sequence", "ordering": ["key"]},
        ),
        sql.migration("0022_deadlines_and_sequences"),
    ]
