"""A job enqueued into a pause is inserted held (blocked, 'paused'), whatever the path that
enqueues it, and a client cannot make a paused job run by forging the note of the pauses
(sql/schema/flow.sql: pqjobs_flow_pauses_noted, pqjobs_job_paused_at_enqueue)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from django.db import connection, transaction
from django.db.models.expressions import RawSQL

from django_pqjobs import enqueue_batch, enqueue_job, enqueue_many, flow
from django_pqjobs.models import Job
from django_pqjobs.worker.claiming import claim_jobs
from tests.integration.test_least_privilege import acting_as, roles  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)
DB = "default"

PATHS: dict[str, Callable[[str], list[int]]] = {
    "enqueue_job": lambda queue: [enqueue_job("tests.noop", queue=queue)],
    "enqueue_many": lambda queue: enqueue_many("tests.noop", [{}] * 3, queue=queue),
    "enqueue_batch": lambda queue: list(enqueue_batch("tests.noop", [{}] * 3, queue=queue).job_ids),
    "keyed": lambda queue: [enqueue_job("tests.limited", {"k": "a"}, queue=queue)],
    "keyed many": lambda queue: enqueue_many("tests.limited", [{"k": "a"}] * 3, queue=queue),
    "fair": lambda queue: enqueue_many("tests.fair_noop", [{"tenant": 1}] * 3, queue=queue),
    "unique": lambda queue: enqueue_many(
        "tests.noop", [{"n": n, "q": queue} for n in range(3)], queue=queue, unique_for=60
    ),
}


def held(ids: list[int]) -> set[tuple[str, str | None]]:
    return set(Job.objects.filter(pk__in=ids).values_list("status", "blocked_by"))


@pytest.mark.parametrize("path", list(PATHS))
def test_every_enqueue_path_into_a_paused_queue_inserts_held_and_resume_releases(path):
    open_ids = PATHS[path]("open")  # beside the pause: ready (or held by its key's limit)
    assert flow.pause_queue("held")
    ids = PATHS[path]("held")
    assert held(ids) == {("blocked", "paused")}
    assert claim_jobs(DB, "w", ["held"], 10).jobs == []
    assert flow.resume_queue("held") == len(ids)
    assert held(ids) == {("ready", None)}
    assert "paused" not in set(Job.objects.filter(pk__in=open_ids).values_list("blocked_by"))


def test_a_paused_job_type_holds_its_jobs_in_every_queue():
    assert flow.pause_job_type("tests.noop")
    ids = [*enqueue_many("tests.noop", [{}] * 2, queue="a"), enqueue_job("tests.noop")]
    other = enqueue_job("tests.echo")
    assert held(ids) == {("blocked", "paused")}
    assert held([other]) == {("ready", None)}
    assert flow.resume_job_type("tests.noop") == 3
    assert held(ids) == {("ready", None)}


def test_a_keyed_job_enqueued_into_a_pause_is_held_by_the_pause_not_its_limit():
    """Its key at its limit (a job of it ready elsewhere): held 'paused', so resuming
    releases it and the claim then applies the limit (it read 'limit' before)."""
    (first,) = enqueue_many("tests.limited", [{"k": "a"}], queue="open")
    assert flow.pause_queue("held")
    ids = enqueue_many("tests.limited", [{"k": "a"}] * 2, queue="held")
    assert held(ids) == {("blocked", "paused")}
    assert flow.resume_queue("held") == 2
    # one slot: the first job starts, the others wait for it
    claimed = claim_jobs(DB, "w", None, 10).jobs
    assert [job.id for job in claimed] == [first]


def test_a_fair_job_held_at_enqueue_keeps_its_turn():
    assert flow.pause_queue("held")
    ids = enqueue_many("tests.fair_noop", [{"tenant": 1}, {"tenant": 2}], queue="held")
    turns = list(Job.objects.filter(pk__in=ids).values_list("fair_turn", flat=True))
    assert None not in turns
    assert flow.resume_queue("held") == 2
    assert {job.id for job in claim_jobs(DB, "w", None, 10).jobs} == set(ids)


def test_a_note_forged_before_the_insert_is_written_over(roles):  # noqa: F811
    """A client sets pqjobs.paused itself ('{}': nothing paused) in its transaction, or for
    its session, then enqueues into a paused queue: each INSERT statement notes the pauses
    afresh, so its jobs are held all the same."""
    assert flow.pause_queue("held")
    with acting_as(roles.web):
        with connection.cursor() as cursor:
            cursor.execute("SET pqjobs.paused = '{}'")
        with transaction.atomic():
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('pqjobs.paused', '{}', true)")
            ids = enqueue_many("tests.noop", [{}] * 3, queue="held")
            ids.append(enqueue_job("tests.noop", queue="held"))
            with connection.cursor() as cursor:
                cursor.execute("SELECT set_config('pqjobs.paused', '', true)")
            ids.append(enqueue_job("tests.noop", queue="held"))
        with connection.cursor() as cursor:
            cursor.execute("RESET pqjobs.paused")
    assert held(ids) == {("blocked", "paused")}


def test_a_note_forged_inside_the_insert_never_starts_a_paused_job(roles):  # noqa: F811
    """The one place a client can change the note after the statement wrote it: an
    expression of the very row it inserts. Its job may then be inserted ready, but the
    claim reads the pauses with the owner's rights and holds it: it never starts."""
    assert flow.pause_queue("held")
    forged = RawSQL("set_config('pqjobs.paused', '{}', true)", [])
    with acting_as(roles.web):
        job = Job.objects.create(job_type="tests.noop", queue="held", error_type=forged)
    assert held([job.pk]) <= {("ready", None), ("blocked", "paused")}
    for _ in range(2):
        assert claim_jobs(DB, "w", None, 10).jobs == []
    assert held([job.pk]) == {("blocked", "paused")}
    assert flow.resume_queue("held") == 1
    assert [j.id for j in claim_jobs(DB, "w", None, 10).jobs] == [job.pk]


def test_an_insert_into_the_hot_partition_notes_the_pauses_too():
    """Statement triggers are not cloned to partitions: the hot table has its own."""
    assert flow.pause_queue("held")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT set_config('pqjobs.paused', '{}', true)")
        cursor.execute(
            "INSERT INTO pqjobs_job_hot (job_type, queue, payload, status, attempts, "
            "max_attempts) VALUES ('tests.noop', 'held', '{}', 'ready', 0, 1) RETURNING id"
        )
        (job,) = cursor.fetchone()
    assert held([job]) == {("blocked", "paused")}


def test_a_job_inserted_with_no_note_reads_the_pauses_itself():
    """Where no statement trigger ran (the setting empty), the row trigger reads the table."""
    assert flow.pause_queue("held")
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("ALTER TABLE pqjobs_job_hot DISABLE TRIGGER pqjobs_job_pauses_noted")
        cursor.execute("ALTER TABLE pqjobs_job DISABLE TRIGGER pqjobs_job_pauses_noted")
        cursor.execute("SELECT set_config('pqjobs.paused', '', true)")
        job = enqueue_job("tests.noop", queue="held")
        beside = enqueue_job("tests.noop", queue="open")
        cursor.execute("ALTER TABLE pqjobs_job ENABLE TRIGGER pqjobs_job_pauses_noted")
        cursor.execute("ALTER TABLE pqjobs_job_hot ENABLE TRIGGER pqjobs_job_pauses_noted")
    assert held([job]) == {("blocked", "paused")}
    assert held([beside]) == {("ready", None)}
