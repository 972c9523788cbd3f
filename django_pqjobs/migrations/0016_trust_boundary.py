"""The trust boundary: every function pins its search_path and names our objects with their
schema; EXECUTE is taken back from PUBLIC (roles that had table privileges keep what they
used). See ``django_pqjobs/sql/migrations/0016_trust_boundary.up.sql``."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0015_note_changes_any_size"),
    ]

    operations = [
        sql.migration("0016_trust_boundary"),
    ]
