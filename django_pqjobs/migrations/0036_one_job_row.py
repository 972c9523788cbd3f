"""One job row: the job an enqueue inserts is the type pqjobs_job_spec, and
pqjobs_enqueue(pqjobs_job_spec) its one INSERT (``django_pqjobs/sql/migrations/0036_one_job_row.up.sql``)."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0035_fair_turns_per_statement"),
    ]

    operations = [
        sql.migration("0036_one_job_row"),
    ]
