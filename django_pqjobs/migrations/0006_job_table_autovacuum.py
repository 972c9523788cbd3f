"""Vacuum the job table early and without throttling.

Every job leaves two dead row versions behind (claim and completion) and pruning deletes
whole batches, so the default thresholds (20 % of the table) let dead rows pile up to
hundreds of thousands before autovacuum starts, and its default throttling then lets
them grow faster than it removes them. Dead rows slow the claim and make the table grow.
"""

from django.db import migrations

SETTINGS = (
    "autovacuum_vacuum_scale_factor = 0.02, autovacuum_vacuum_threshold = 1000, "
    "autovacuum_vacuum_insert_scale_factor = 0.05, autovacuum_analyze_scale_factor = 0.05, "
    "autovacuum_vacuum_cost_delay = 0"
)
RESET = (
    "autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, "
    "autovacuum_vacuum_insert_scale_factor, autovacuum_analyze_scale_factor, "
    "autovacuum_vacuum_cost_delay"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0005_admin_partial_indexes"),
    ]

    operations = [
        migrations.RunSQL(
            f"ALTER TABLE pqjobs_job SET ({SETTINGS})",
            reverse_sql=f"ALTER TABLE pqjobs_job RESET ({RESET})",
        ),
    ]
