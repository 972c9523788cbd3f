"""Held jobs out of the claim path: the indexes of ready jobs by concurrency key and by rate
key, the trigger that inserts a job flow control would hold already as blocked, the one that
holds jobs enqueued into a paused queue, and the claim that looks at pauses only for the jobs
it picked (``django_pqjobs/sql/migrations/0026_held_at_enqueue.up.sql``)."""

from django.db import migrations, models

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0025_fair_claiming"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("concurrency_key"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("run_after"),
                condition=models.Q(("concurrency_key__isnull", False), ("status", "ready")),
                name="pqjobs_job_ready_key",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("rate_key"),
                models.OrderBy(models.F("priority"), descending=True),
                models.F("run_after"),
                condition=models.Q(("rate_key__isnull", False), ("status", "ready")),
                name="pqjobs_job_ready_rate",
            ),
        ),
        sql.migration("0026_held_at_enqueue"),
    ]
