"""Versioned payloads and encrypted job types: a job's ``payload_version`` (the shape of its
type's payload it was written for; the worker upgrades an older one), the table
``pqjobs_protected_type`` (the encrypted job types, as ``migrate`` publishes them from the
code; ``pqjobs_enqueue()`` refuses an unsealed payload of one), and the permission
``view_job_secrets``. ``pqjobs_enqueue()`` takes ``p_payload_version`` and ``pqjobs_claim()``
returns it. See ``django_pqjobs/sql/migrations/0023_payload_versions_and_protected_types.up.sql``."""

from django.db import migrations, models

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0022_deadlines_and_sequences"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="payload_version",
            field=models.PositiveSmallIntegerField(
                blank=True,
                help_text="The version of its job type's payload shape the payload was written "
                "for (@job(version=N)); empty: 1. An older one is upgraded before the handler "
                "runs.",
                null=True,
            ),
        ),
        migrations.AlterModelOptions(
            name="job",
            options={
                "ordering": ["-id"],
                "permissions": [
                    (
                        "view_job_secrets",
                        "Can see secrets in job data (fields PQJOBS['REDACTED_FIELDS'] names, "
                        "encrypted payloads and results)",
                    )
                ],
            },
        ),
        migrations.CreateModel(
            name="ProtectedType",
            fields=[
                ("job_type", models.CharField(max_length=200, primary_key=True, serialize=False)),
                ("fields", models.JSONField(blank=True, null=True)),
            ],
            options={"db_table": "pqjobs_protected_type", "ordering": ["job_type"]},
        ),
        sql.migration("0023_payload_versions_and_protected_types"),
    ]
