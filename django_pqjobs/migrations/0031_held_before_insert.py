"""A job enqueued into a pause is inserted held, written once: the pauses are noted once per
INSERT statement and a BEFORE row trigger holds the rows they pause; one pause rule for
inserts and retries (``django_pqjobs/sql/migrations/0031_held_before_insert.up.sql``)."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0030_hot_id_sequence"),
    ]

    operations = [
        sql.migration("0031_held_before_insert"),
    ]
