"""Composition: batches with callbacks, dependencies, and waiting for a result.

- ``pqjobs_batch``: a batch's counts and callbacks; ``pqjobs_job.batch_id`` its members,
  ``pqjobs_job.callback_of_id`` the callbacks it enqueued.
- ``pqjobs_dependency``: one row per edge; ``pqjobs_job.waiting_for`` counts a dependent's
  unfinished dependencies, ``has_dependents`` marks a job some job waits for, the new
  status ``waiting`` holds a dependent until its dependencies are done.
- ``pqjobs_job.waited_on``: someone waits for this job (``wait_for()``); its finish is
  announced on the channel ``pqjobs_finished``.

Every column added to ``pqjobs_job`` has a constant default: adding it changes only the
catalog, whatever the size of the table.

The bookkeeping is done by the database, so it holds however a job's status changes
(worker, rescue, admin, code) and whoever changes it. A statement trigger notes each member
or dependency that becomes finished (or unfinished again: Retry), or is deleted while active,
in ``pqjobs_settle``; a deferred trigger settles the transaction's notes at its commit:
dependents become ready (or cancelled), then batch counts move and a batch whose last
member finished gets its callbacks. Settling at commit takes the row locks of dependents
and batches in id order, so workers that finish members of the same batches or
prerequisites of the same jobs never deadlock, and the batch row lock makes exactly one
transaction see its last member finish. Jobs without batch or dependents are never noted
(the statement triggers' join filters them out) and their transactions settle nothing.
"""

import django.db.models.deletion
import django.db.models.functions.datetime
from django.db import migrations, models

FINAL = "('done', 'failed', 'cancelled')"
# In pqjobs_settle(): the notes being settled, as rows; and the dependency edges of the
# noted jobs that have just finished (or were deleted while active), with their notes.
NOTES = (
    "unnest(a_job, a_batch, a_dependents, a_old, a_new)\n"
    "                AS s(job_id, batch_id, has_dependents, old_status, new_status)"
)
FINISHED_EDGES = f"""FROM pqjobs_dependency d JOIN {NOTES} ON s.job_id = d.depends_on_id
                WHERE s.has_dependents AND s.old_status NOT IN {FINAL}"""

# The statement trigger's function (migration 0015 replaces it; its way back uses this).
NOTE_CHANGES = f"""CREATE FUNCTION pqjobs_note_changes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    first boolean := current_setting('pqjobs.unsettled', true) IS DISTINCT FROM 'on';
    noted integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        INSERT INTO pqjobs_settle
        SELECT txid_current(), o.id, o.batch_id, o.has_dependents, o.status, 'deleted',
               first AND row_number() OVER () = 1
        FROM pqjobs_old o
        WHERE (o.batch_id IS NOT NULL OR o.has_dependents) AND o.status NOT IN {FINAL};
    ELSE
        INSERT INTO pqjobs_settle
        SELECT txid_current(), n.id, n.batch_id, n.has_dependents, o.status, n.status,
               first AND row_number() OVER () = 1
        FROM pqjobs_new n JOIN pqjobs_old o ON o.id = n.id
        WHERE (n.batch_id IS NOT NULL OR n.has_dependents)
          AND (o.status IN {FINAL}) <> (n.status IN {FINAL});
    END IF;
    GET DIAGNOSTICS noted = ROW_COUNT;
    IF first AND noted > 0 THEN
        PERFORM set_config('pqjobs.unsettled', 'on', true);
    END IF;
    RETURN NULL;
END
$$;
"""

SETTLE = f"""
CREATE UNLOGGED TABLE pqjobs_settle (
    txid bigint NOT NULL,
    job_id bigint NOT NULL,
    batch_id bigint,
    has_dependents boolean NOT NULL,
    old_status text NOT NULL,
    new_status text NOT NULL,
    carrier boolean NOT NULL
);
CREATE INDEX pqjobs_settle_txid ON pqjobs_settle (txid);

-- Statement-level triggers with transition tables: one INSERT of the notes per statement,
-- however many rows it changed (a row trigger cost a PL/pgSQL call per finished member).
-- The first note of a transaction (since it last settled) is the carrier: the deferred
-- trigger fires for it alone, once, rather than once per note.
{NOTE_CHANGES}
CREATE TRIGGER pqjobs_job_composed_status
AFTER UPDATE ON pqjobs_job
REFERENCING OLD TABLE AS pqjobs_old NEW TABLE AS pqjobs_new
FOR EACH STATEMENT
EXECUTE FUNCTION pqjobs_note_changes();

CREATE TRIGGER pqjobs_job_composed_deleted
AFTER DELETE ON pqjobs_job
REFERENCING OLD TABLE AS pqjobs_old
FOR EACH STATEMENT
EXECUTE FUNCTION pqjobs_note_changes();

-- A batch finished: count the finish and enqueue its callbacks (each a prepared job in
-- pqjobs_batch.callbacks). Called with the batch row locked.
CREATE FUNCTION pqjobs_batch_finished(p_batch bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    b pqjobs_batch%ROWTYPE;
    kind text;
    spec jsonb;
    queues text[] := '{{}}';
BEGIN
    UPDATE pqjobs_batch SET finished_at = now(), finishes = finishes + 1
    WHERE id = p_batch RETURNING * INTO b;
    FOREACH kind IN ARRAY ARRAY['success', 'failure', 'finish'] LOOP
        CONTINUE WHEN kind = 'success' AND (b.failed > 0 OR b.cancelled > 0);
        CONTINUE WHEN kind = 'failure' AND b.failed = 0;
        spec := b.callbacks -> kind;
        CONTINUE WHEN spec IS NULL;
        INSERT INTO pqjobs_job (
            job_type, queue, payload, status, priority, attempts, max_attempts, run_after,
            timeout_seconds, last_error, error_type, created_at, updated_at, callback_of_id
        ) VALUES (
            spec ->> 'job_type', spec ->> 'queue', spec -> 'payload', 'ready',
            (spec ->> 'priority')::integer, 0, (spec ->> 'max_attempts')::integer, now(),
            (spec ->> 'timeout')::double precision, '', '', now(), now(), p_batch
        );
        queues := queues || (spec ->> 'queue');
    END LOOP;
    IF cardinality(queues) > 0 AND pqjobs_anyone_listens() THEN
        PERFORM pg_notify('pqjobs', q) FROM (SELECT DISTINCT unnest(queues) AS q) u;
    END IF;
END
$$;

-- All members are in: a batch with none active finishes now (an empty one, or one whose
-- members all finished before the batch was sealed).
CREATE FUNCTION pqjobs_batch_seal(p_batch bigint) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    left_active integer;
BEGIN
    UPDATE pqjobs_batch SET sealed = true WHERE id = p_batch AND NOT sealed
    RETURNING pending INTO left_active;
    IF left_active = 0 THEN
        PERFORM pqjobs_batch_finished(p_batch);
    END IF;
END
$$;

CREATE FUNCTION pqjobs_settle() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
    me bigint := txid_current();
    a_job bigint[];
    a_batch bigint[];
    a_dependents boolean[];
    a_old text[];
    a_new text[];
    b record;
    left_active integer;
    is_sealed boolean;
    released text[];
    cascaded integer;
BEGIN
    -- Settles all of this transaction's notes (fired by the carrier, the first of them).
    -- Settling may change more jobs (a cancelled dependent, say), whose notes the next
    -- round takes: they are not carriers while the flag is on.
    LOOP
        WITH taken AS (DELETE FROM pqjobs_settle WHERE txid = me RETURNING *)
        SELECT array_agg(job_id), array_agg(batch_id), array_agg(has_dependents),
               array_agg(old_status), array_agg(new_status)
        INTO a_job, a_batch, a_dependents, a_old, a_new
        FROM taken;
        EXIT WHEN a_job IS NULL;
        cascaded := 0;

        -- Dependents of prerequisites that finished (or were deleted while active).
        IF true = ANY(a_dependents) THEN
            PERFORM 1 FROM pqjobs_job j
            WHERE j.status = 'waiting' AND j.id IN (
                SELECT d.job_id {FINISHED_EDGES})
            ORDER BY j.id
            FOR UPDATE;
            WITH x AS (
                SELECT d.job_id,
                       count(*) AS finished,
                       min(s.job_id) FILTER (WHERE s.new_status <> 'done') AS bad_id,
                       (array_agg(s.new_status ORDER BY s.job_id)
                            FILTER (WHERE s.new_status <> 'done'))[1] AS bad_status
                {FINISHED_EDGES}
                GROUP BY d.job_id
            ), moved AS (
                UPDATE pqjobs_job AS j SET
                    waiting_for = j.waiting_for - x.finished,
                    status = CASE
                        WHEN x.bad_id IS NOT NULL AND j.on_dependency_failure = 'cancel'
                            THEN 'cancelled'
                        WHEN j.waiting_for - x.finished <= 0 THEN 'ready'
                        ELSE 'waiting' END,
                    finished_at = CASE
                        WHEN x.bad_id IS NOT NULL AND j.on_dependency_failure = 'cancel'
                            THEN now() END,
                    error_type = CASE
                        WHEN x.bad_id IS NOT NULL AND j.on_dependency_failure = 'cancel'
                            THEN 'DependencyFailed' ELSE j.error_type END,
                    last_error = CASE
                        WHEN x.bad_id IS NOT NULL AND j.on_dependency_failure = 'cancel'
                            THEN format('dependency #%s %s', x.bad_id, CASE x.bad_status
                                WHEN 'failed' THEN 'failed'
                                WHEN 'cancelled' THEN 'was cancelled'
                                ELSE 'was deleted before it finished' END)
                        ELSE j.last_error END,
                    updated_at = now()
                FROM x
                WHERE j.id = x.job_id AND j.status = 'waiting'
                RETURNING j.status, j.queue
            )
            SELECT array_agg(DISTINCT queue) FILTER (WHERE status = 'ready'),
                   count(*) FILTER (WHERE status = 'cancelled')
            INTO released, cascaded
            FROM moved;
            IF released IS NOT NULL AND pqjobs_anyone_listens() THEN
                PERFORM pg_notify('pqjobs', q) FROM unnest(released) q;
            END IF;
        END IF;

        -- Batch counts, batch by batch in id order; the one whose last member just
        -- finished (and that is sealed) gets its callbacks.
        FOR b IN
            SELECT s.batch_id,
                   sum((s.old_status IN {FINAL})::integer
                       - (s.new_status IN {FINAL} OR s.new_status = 'deleted')::integer)
                       AS d_pending,
                   sum((s.new_status = 'done')::integer - (s.old_status = 'done')::integer)
                       AS d_done,
                   sum((s.new_status = 'failed')::integer
                       - (s.old_status = 'failed')::integer) AS d_failed,
                   sum((s.new_status IN ('cancelled', 'deleted'))::integer
                       - (s.old_status = 'cancelled')::integer) AS d_cancelled
            FROM {NOTES}
            WHERE s.batch_id IS NOT NULL
            GROUP BY s.batch_id
            ORDER BY s.batch_id
        LOOP
            UPDATE pqjobs_batch SET
                pending = pending + b.d_pending,
                done = done + b.d_done,
                failed = failed + b.d_failed,
                cancelled = cancelled + b.d_cancelled,
                finished_at = CASE WHEN pending + b.d_pending > 0 THEN NULL
                                   ELSE finished_at END
            WHERE id = b.batch_id
            RETURNING pending, sealed INTO left_active, is_sealed;
            IF left_active = 0 AND b.d_pending < 0 AND is_sealed THEN
                PERFORM pqjobs_batch_finished(b.batch_id);
            END IF;
        END LOOP;
        -- only a dependent cancelled here can have left notes of its own
        EXIT WHEN cascaded = 0;
    END LOOP;
    PERFORM set_config('pqjobs.unsettled', '', true);
    RETURN NULL;
END
$$;

CREATE CONSTRAINT TRIGGER pqjobs_settle_at_commit
AFTER INSERT ON pqjobs_settle
DEFERRABLE INITIALLY DEFERRED
FOR EACH ROW
WHEN (NEW.carrier)
EXECUTE FUNCTION pqjobs_settle();

-- wait_for(): a finish of a job someone waits on is announced (payload: the job id).
CREATE FUNCTION pqjobs_announce_finish() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('pqjobs_finished', NEW.id::text);
    RETURN NULL;
END
$$;

CREATE TRIGGER pqjobs_job_waited_finished
AFTER UPDATE OF status ON pqjobs_job
FOR EACH ROW
WHEN (NEW.waited_on AND NEW.status IN {FINAL} AND OLD.status NOT IN {FINAL})
EXECUTE FUNCTION pqjobs_announce_finish();
"""

UNSETTLE = """
DROP TRIGGER pqjobs_job_waited_finished ON pqjobs_job;
DROP FUNCTION pqjobs_announce_finish();
DROP TRIGGER pqjobs_job_composed_deleted ON pqjobs_job;
DROP TRIGGER pqjobs_job_composed_status ON pqjobs_job;
DROP TABLE pqjobs_settle;
DROP FUNCTION pqjobs_settle();
DROP FUNCTION pqjobs_batch_seal(bigint);
DROP FUNCTION pqjobs_batch_finished(bigint);
DROP FUNCTION pqjobs_note_changes();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("django_pqjobs", "0012_operator_audit"),
    ]

    operations = [
        migrations.CreateModel(
            name="Batch",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("label", models.CharField(blank=True, db_default="", default="", max_length=200)),
                ("callbacks", models.JSONField(blank=True, default=dict)),
                (
                    "sealed",
                    models.BooleanField(
                        db_default=False,
                        default=False,
                        help_text="All members are in: callbacks may fire once none is active.",
                    ),
                ),
                ("total", models.IntegerField(db_default=0, default=0)),
                (
                    "pending",
                    models.IntegerField(db_default=0, default=0, help_text="Members not finished."),
                ),
                ("done", models.IntegerField(db_default=0, default=0)),
                ("failed", models.IntegerField(db_default=0, default=0)),
                (
                    "cancelled",
                    models.IntegerField(
                        db_default=0,
                        default=0,
                        help_text="Members cancelled, or deleted before they finished.",
                    ),
                ),
                (
                    "finishes",
                    models.IntegerField(
                        db_default=0,
                        default=0,
                        help_text="How many times it finished (Retry reopens it).",
                    ),
                ),
                (
                    "created_at",
                    models.DateTimeField(db_default=django.db.models.functions.datetime.Now()),
                ),
                ("finished_at", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "verbose_name_plural": "batches",
                "db_table": "pqjobs_batch",
                "ordering": ["-id"],
            },
        ),
        migrations.CreateModel(
            name="Dependency",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
            ],
            options={
                "db_table": "pqjobs_dependency",
            },
        ),
        migrations.RemoveConstraint(
            model_name="job",
            name="pqjobs_job_status_valid",
        ),
        migrations.AddField(
            model_name="job",
            name="has_dependents",
            field=models.BooleanField(
                db_default=False, default=False, help_text="Some job waits for this one."
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="on_dependency_failure",
            field=models.CharField(
                db_default="cancel",
                default="cancel",
                help_text="When a dependency fails for good: cancel this job, or run it anyway.",
                max_length=8,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="waited_on",
            field=models.BooleanField(
                db_default=False,
                default=False,
                help_text="Someone called wait_for() on this job: its finish is announced.",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="waiting_for",
            field=models.IntegerField(
                db_default=0, default=0, help_text="Dependencies not finished yet."
            ),
        ),
        migrations.AlterField(
            model_name="job",
            name="status",
            field=models.CharField(
                choices=[
                    ("waiting", "Waiting for dependencies"),
                    ("ready", "Ready"),
                    ("blocked", "Blocked"),
                    ("running", "Running"),
                    ("done", "Done"),
                    ("failed", "Failed"),
                    ("cancelled", "Cancelled"),
                ],
                db_default="ready",
                default="ready",
                max_length=16,
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="batch",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                help_text="The batch this job is a member of.",
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="members",
                to="django_pqjobs.batch",
            ),
        ),
        migrations.AddField(
            model_name="job",
            name="callback_of",
            field=models.ForeignKey(
                blank=True,
                db_constraint=False,
                db_index=False,
                help_text="The batch whose finish enqueued this job (a callback).",
                null=True,
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="callback_jobs",
                to="django_pqjobs.batch",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.OrderBy(models.F("id"), descending=True),
                condition=models.Q(("status", "waiting")),
                name="pqjobs_job_waiting",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("batch"),
                models.F("status"),
                condition=models.Q(("batch__isnull", False)),
                name="pqjobs_job_batch",
            ),
        ),
        migrations.AddIndex(
            model_name="job",
            index=models.Index(
                models.F("callback_of"),
                condition=models.Q(("callback_of__isnull", False)),
                name="pqjobs_job_callback",
            ),
        ),
        migrations.AddConstraint(
            model_name="job",
            constraint=models.CheckConstraint(
                condition=models.Q(
                    (
                        "status__in",
                        ["waiting", "ready", "blocked", "running", "done", "failed", "cancelled"],
                    )
                ),
                name="pqjobs_job_status_valid",
            ),
        ),
        migrations.AddField(
            model_name="dependency",
            name="depends_on",
            field=models.ForeignKey(
                db_constraint=False,
                help_text="The job it waits for.",
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="dependent_edges",
                to="django_pqjobs.job",
            ),
        ),
        migrations.AddField(
            model_name="dependency",
            name="job",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                help_text="The dependent job.",
                on_delete=django.db.models.deletion.DO_NOTHING,
                related_name="dependency_edges",
                to="django_pqjobs.job",
            ),
        ),
        migrations.AddConstraint(
            model_name="dependency",
            constraint=models.UniqueConstraint(
                fields=("job", "depends_on"), name="pqjobs_dependency_unique"
            ),
        ),
        migrations.RunSQL(SETTLE, reverse_sql=UNSETTLE),
    ]
