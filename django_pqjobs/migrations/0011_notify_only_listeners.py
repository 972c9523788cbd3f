"""NOTIFY only while a worker listens.

A transaction that sends NOTIFY holds a database-wide lock from its commit until its WAL
flush, so enqueues that notify commit one at a time. Under a stream of jobs every worker
stops listening (it claims on a short interval instead), and the notifications are then
paid for and heard by no one. Workers now say in ``pqjobs_worker.listening`` whether they
listen, and ``pqjobs_enqueue()`` notifies only when one does; a worker that starts
listening claims once at once, for whatever was enqueued unannounced meanwhile.

The question is asked through ``pqjobs_anyone_listens()``, which runs with the rights of
the role that ran this migration (SECURITY DEFINER), so roles that may enqueue need no
grant on ``pqjobs_worker``.
"""

import importlib

from django.db import migrations, models

previous = importlib.import_module("django_pqjobs.migrations.0010_operations")

LISTENS = """
CREATE FUNCTION pqjobs_anyone_listens() RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT AS $$
    SELECT EXISTS (SELECT 1 FROM pqjobs_worker WHERE listening)
$$;
"""

CREATE = previous.CREATE.replace(
    "CREATE FUNCTION pqjobs_enqueue(", "CREATE OR REPLACE FUNCTION pqjobs_enqueue("
).replace(
    "    IF new_id IS NOT NULL AND p_notify_channel IS NOT NULL THEN",
    "    IF new_id IS NOT NULL AND p_notify_channel IS NOT NULL\n"
    "       AND pqjobs_anyone_listens() THEN",
)
assert "pqjobs_anyone_listens()" in CREATE
UNDO = previous.CREATE.replace(
    "CREATE FUNCTION pqjobs_enqueue(", "CREATE OR REPLACE FUNCTION pqjobs_enqueue("
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0010_operations"),
    ]

    operations = [
        migrations.AddField(
            model_name="workerrecord",
            name="listening",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="Whether its listener LISTENs now; enqueues send NOTIFY only while "
                "some worker does.",
            ),
        ),
        migrations.RunSQL(LISTENS, reverse_sql="DROP FUNCTION pqjobs_anyone_listens()"),
        migrations.RunSQL(CREATE, reverse_sql=UNDO),
    ]
