"""``pqjobs_note_changes()``, the statement trigger behind batches and dependencies: a note
whose plan suits a statement of any size, never compiled by JIT.

PL/pgSQL keeps the plan of a static statement for the life of the server session, made from
the transition tables of the first statement that fired the trigger there. Migration 0013's
note joined the old and new rows, and on a long-lived connection (a worker's, or a web
process's with ``CONN_MAX_AGE``) that went wrong two ways:

- first fired by a small statement (a claim of a few jobs), the join was planned as a nested
  loop, and a later statement that changed many members of a batch (an admin action, a bulk
  cancel) ran that loop over every pair of rows: 4 s for 10,000 members, hours for a
  million, holding their row locks all along;
- first fired by a large statement, the plan's cost passed ``jit_above_cost``, so every later
  claim and completion of that session compiled it anew with LLVM: ~10 ms each instead of
  ~0.5 ms.

Now the old and new rows are matched by grouping on the job id (sorted or hashed: either
way in n log n or better, whatever the plan was made for), the function runs with JIT off,
and a scan of the new rows first asks whether any belongs to a batch or has dependents, so
the statements of plain jobs (the hot path) stop there.
"""

import importlib

from django.db import migrations

composition = importlib.import_module("django_pqjobs.migrations.0013_composition")
FINAL = composition.FINAL

UPDATED = f"""
CREATE OR REPLACE FUNCTION pqjobs_note_changes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
-- its plans are kept for the session: one made for a large statement must not be compiled
-- again at every small one
SET jit = off
AS $$
DECLARE
    first boolean;
    noted integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        first := current_setting('pqjobs.unsettled', true) IS DISTINCT FROM 'on';
        INSERT INTO pqjobs_settle
        SELECT txid_current(), o.id, o.batch_id, o.has_dependents, o.status, 'deleted',
               first AND row_number() OVER () = 1
        FROM pqjobs_old o
        WHERE (o.batch_id IS NOT NULL OR o.has_dependents) AND o.status NOT IN {FINAL};
    ELSE
        -- (in this branch: the DELETE trigger has no pqjobs_new)
        IF NOT EXISTS (
            SELECT FROM pqjobs_new n WHERE n.batch_id IS NOT NULL OR n.has_dependents
        ) THEN
            RETURN NULL;
        END IF;
        first := current_setting('pqjobs.unsettled', true) IS DISTINCT FROM 'on';
        -- Each changed row's old and new versions, matched by grouping on the id rather
        -- than by a join: no plan of a grouping is quadratic, whatever size it was made for.
        INSERT INTO pqjobs_settle
        SELECT txid_current(), c.id, c.batch_id, c.has_dependents, c.old_status,
               c.new_status, first AND row_number() OVER () = 1
        FROM (
            SELECT v.id, max(v.batch_id) AS batch_id,
                   bool_or(v.has_dependents) AS has_dependents,
                   max(v.old_status) AS old_status, max(v.new_status) AS new_status
            FROM (
                SELECT n.id, n.batch_id, n.has_dependents, NULL::text AS old_status,
                       n.status::text AS new_status
                FROM pqjobs_new n
                WHERE n.batch_id IS NOT NULL OR n.has_dependents
                UNION ALL
                SELECT o.id, NULL, NULL, o.status::text, NULL
                FROM pqjobs_old o
            ) v
            GROUP BY v.id
        ) c
        WHERE c.new_status IS NOT NULL
          AND (c.old_status IN {FINAL}) <> (c.new_status IN {FINAL});
    END IF;
    GET DIAGNOSTICS noted = ROW_COUNT;
    IF first AND noted > 0 THEN
        PERFORM set_config('pqjobs.unsettled', 'on', true);
    END IF;
    RETURN NULL;
END
$$;
"""

# Migration 0013's function, for the way back.
JOINED = composition.NOTE_CHANGES.replace(
    "CREATE FUNCTION pqjobs_note_changes()", "CREATE OR REPLACE FUNCTION pqjobs_note_changes()"
)


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0014_claim_function"),
    ]

    operations = [
        migrations.RunSQL(UPDATED, reverse_sql=JOINED),
    ]
