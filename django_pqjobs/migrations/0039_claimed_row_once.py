"""The claim's output row declared once: both paths of pqjobs_claim() end in the same SELECT
(``django_pqjobs/sql/migrations/0039_claimed_row_once.up.sql``)."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0037_one_delete_cascade"),
    ]

    operations = [
        sql.migration("0039_claimed_row_once"),
    ]
