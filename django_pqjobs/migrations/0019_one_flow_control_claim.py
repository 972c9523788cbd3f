"""One flow-control claim: pqjobs_claim() takes p_scan (how far to look for held jobs) and
does what the hold-back statement did. See
``django_pqjobs/sql/migrations/0019_one_flow_control_claim.up.sql``."""

from django.db import migrations

from django_pqjobs import sql


def forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        sql.run(cursor, "migrations/0019_one_flow_control_claim.up.sql")


def backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        sql.run(cursor, "migrations/0019_one_flow_control_claim.down.sql")


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0018_attempt_snoozed"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
