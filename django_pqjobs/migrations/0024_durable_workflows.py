"""Durable workflows: ``pqjobs_step`` (a job's recorded steps, sleeps and waits) and
``pqjobs_signal`` (the signals sent to jobs), the index of parked jobs (waiting with no
dependency left, by when they wake) the wake-up sweep reads, the ``parked`` attempt outcome
and the ``end_wait`` and ``signal`` audit actions. The statements are
``django_pqjobs/sql/queries/workflows.sql``, and a step's record is
``pqjobs_record_step()`` (``django_pqjobs/sql/migrations/0024_durable_workflows.up.sql``)."""

import django.core.serializers.json
import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0023_payload_versions_and_protected_types"),
    ]

    operations = [
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
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
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
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
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
            ],
            options={
                "db_table": "pqjobs_step",
                "ordering": ["job", "id"],
            },
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
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
        migrations.AlterField(
            model_name="jobattempt",
            name="outcome",
            field=models.CharField(
                choices=[
                    ("error", "Error (retryable)"),
                    ("permanent", "Permanent error"),
                    ("timeout", "Timed out"),
                    ("unknown_type", "No handler registered"),
                    ("lost", "Worker lost (rescued)"),
                    ("released", "Released (the attempt was given back)"),
                    ("snoozed", "Snoozed (not charged)"),
                    ("parked", "Parked (a durable sleep or a wait for a signal; not charged)"),
                    ("cancelled", "Cancelled while running"),
                    ("killed", "Process killed (likely out of memory)"),
                    ("crashed", "Process crashed (signal)"),
                    ("exited", "Process exited early"),
                ],
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
                    ("end_wait", "End a workflow's wait"),
                    ("signal", "Send a signal"),
                ],
                max_length=32,
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
        migrations.AddField(
            model_name="signal",
            name="job",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="signals",
                to="django_pqjobs.job",
            ),
        ),
        migrations.AddField(
            model_name="step",
            name="job",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="steps",
                to="django_pqjobs.job",
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
            constraint=models.UniqueConstraint(fields=("job", "name"), name="pqjobs_step_job_name"),
        ),
        sql.migration("0024_durable_workflows"),
    ]
