"""Roles in bad faith: a job's id is drawn from its sequence, never given, and changes shelf
only through pqjobs_history_shelve() and pqjobs_history_unshelve() (owner's rights, attempts
with it); pqjobs_history_prepare() fails on a name another role took, and is capped; a role
that may not write results may make only the status moves of cancel, retry and signals
(``django_pqjobs/sql/migrations/0028_roles_in_bad_faith.up.sql``)."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0027_partitioned_history"),
    ]

    operations = [
        sql.migration("0028_roles_in_bad_faith"),
    ]
