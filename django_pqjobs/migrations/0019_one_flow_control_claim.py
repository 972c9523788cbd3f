"""One flow-control claim: pqjobs_claim() takes p_scan (how far to look for held jobs) and
does what the hold-back statement did. See
``django_pqjobs/sql/migrations/0019_one_flow_control_claim.up.sql``."""

from django.db import migrations

from django_pqjobs import sql


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0018_attempt_snoozed"),
    ]

    operations = [
        sql.migration("0019_one_flow_control_claim"),
    ]
