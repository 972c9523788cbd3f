"""The hot tables' ids drawn from a plain sequence instead of an identity column, as
migration 0027 now makes them: PostgreSQL 17 and later refuse an identity column on a
partition (``django_pqjobs/sql/migrations/0030_hot_id_sequence.up.sql``). A database
migrated with the form 0027 gave before is brought to this one; unapplying changes nothing."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0032_worker_concurrency_bounds"),
    ]

    operations = [
        sql.migration("0030_hot_id_sequence"),
    ]
