"""One delete cascade: the operator's delete, the prune and the history partition drop call
pqjobs_job_forget() for what their jobs leave behind
(``django_pqjobs/sql/migrations/0037_one_delete_cascade.up.sql``)."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0036_one_job_row"),
    ]

    operations = [
        sql.migration("0037_one_delete_cascade"),
    ]
