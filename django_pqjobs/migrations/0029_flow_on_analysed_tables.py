"""Flow control's statements linear on analysed tables, a retry into a pause held at once,
and pqjobs_enqueue()'s own message for a bad expires_in or expires_at
(``django_pqjobs/sql/migrations/0029_flow_on_analysed_tables.up.sql``)."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0028_roles_in_bad_faith"),
    ]

    operations = [
        sql.migration("0029_flow_on_analysed_tables"),
    ]
