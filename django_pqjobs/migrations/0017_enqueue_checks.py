"""pqjobs_enqueue() refuses the arguments Python's enqueue refuses, for callers that enqueue
from SQL. See ``django_pqjobs/sql/migrations/0017_enqueue_checks.up.sql``."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0016_trust_boundary"),
    ]

    operations = [
        sql.migration("0017_enqueue_checks"),
    ]
