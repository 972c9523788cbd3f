"""Partitioned history: pqjobs_job and pqjobs_attempt become tables partitioned by their
shelf, the tables as they were their hot partitions, attached in place; the history
partitions' functions (``django_pqjobs/sql/migrations/0027_partitioned_history.up.sql``).
A partitioned table's key must hold its partition key, so no foreign key can point at
pqjobs_job any more: the attempts', steps' and signals' go (deleting a job deletes them,
as it did)."""

import django.db.models.deletion
from django.db import migrations, models

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0026_held_at_enqueue"),
    ]

    operations = [
        migrations.AlterField(
            model_name="jobattempt",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="failed_attempts",
                to="django_pqjobs.job",
            ),
        ),
        migrations.AlterField(
            model_name="step",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="steps",
                to="django_pqjobs.job",
            ),
        ),
        migrations.AlterField(
            model_name="signal",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="signals",
                to="django_pqjobs.job",
            ),
        ),
        sql.migration("0027_partitioned_history"),
    ]
