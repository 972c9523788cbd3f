"""pqjobs_enqueue() refuses the arguments Python's enqueue refuses, for callers that enqueue
from SQL. See ``django_pqjobs/sql/migrations/0017_enqueue_checks.up.sql``."""

from django.db import migrations

from django_pqjobs import sql


def forward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        sql.run(cursor, "migrations/0017_enqueue_checks.up.sql")


def backward(apps, schema_editor):
    with schema_editor.connection.cursor() as cursor:
        sql.run(cursor, "migrations/0017_enqueue_checks.down.sql")


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0016_trust_boundary"),
    ]

    operations = [
        migrations.RunPython(forward, backward),
    ]
