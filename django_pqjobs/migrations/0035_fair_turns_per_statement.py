"""enqueue_many gives fair jobs their turns in its own INSERT, asking pqjobs_fair_start once
per statement; the row trigger asks it for one row
(``django_pqjobs/sql/migrations/0035_fair_turns_per_statement.up.sql``)."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0038_shelf_statistics"),
    ]

    operations = [
        sql.migration("0035_fair_turns_per_statement"),
    ]
