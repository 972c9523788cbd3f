# Hand-checked. Recurring jobs: the Schedule table and Job.schedule (the schedule that
# enqueued a job). Neither foreign key has a database constraint: jobs are pruned by plain
# SQL, and a schedule's last_job may point to a pruned job.

import django.core.serializers.json
import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0001_initial"),
    ]

    operations = [
        migrations.CreateModel(
            name="Schedule",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
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
                        blank=True, help_text="Run every N seconds (instead of cron).", null=True
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
                            ("skip", "Skip a run while the previous one is ready or running"),
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
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                (
                    "updated_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
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
                "indexes": [
                    models.Index(
                        condition=models.Q(("enabled", True)),
                        fields=["next_run_at"],
                        name="pqjobs_schedule_due",
                    )
                ],
                "constraints": [
                    models.CheckConstraint(
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
                    models.CheckConstraint(
                        condition=models.Q(("overlap__in", ["skip", "allow"])),
                        name="pqjobs_schedule_overlap_valid",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(("misfire__in", ["run_once", "skip"])),
                        name="pqjobs_schedule_misfire_valid",
                    ),
                ],
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
    ]
