"""The statistics of the hot tables' ``shelf`` column, which migration 0027 added without
any: until autovacuum analysed the table, the planner misjudged every statement about the
hot shelf (``django_pqjobs/sql/migrations/0038_shelf_statistics.up.sql``)."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0033_dashboard_entry"),
    ]

    operations = [
        sql.migration("0038_shelf_statistics"),
    ]
