"""Each worker records the bounds of its live concurrency (what it was started with and its
--max-concurrency), so that set_concurrency and the admin can say what a setting makes each
live worker run. Nullable: a row written by an older worker has neither."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0029_flow_on_analysed_tables"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerrecord",
            name="max_concurrency",
            field=models.IntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="workerrecord",
            name="started_concurrency",
            field=models.IntegerField(blank=True, null=True),
        ),
    ]
