"""Unique jobs: a dedupe key held for a window of time (``unique_until``) and in finished
statuses (``unique_states``). The unique index of dedupe keys becomes SQL's
(``pqjobs_job_unique_key``) and ``pqjobs_enqueue()`` takes the two new arguments. See
``django_pqjobs/sql/migrations/0020_unique_jobs.up.sql``."""

from django.db import migrations, models

import django_pqjobs.models
from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0019_one_flow_control_claim"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="unique_until",
            field=django_pqjobs.models.Timestamp(
                blank=True,
                help_text="The end of the unique_for window the job was enqueued in: its key "
                "is held until then (whatever its status, as unique_states say). Empty: no "
                "window.",
                null=True,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="unique_states",
            field=models.PositiveSmallIntegerField(
                db_default=0,
                default=0,
                help_text="The finished statuses in which the job still holds its dedupe key, "
                "as a mask: 1 done, 2 failed, 4 cancelled (it always holds it while ready, "
                "blocked or running).",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.RemoveConstraint(model_name="job", name="pqjobs_job_active_dedupe"),
            ],
            database_operations=[sql.migration("0020_unique_jobs")],
        ),
    ]
