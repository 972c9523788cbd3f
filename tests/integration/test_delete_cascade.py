"""One delete cascade: an operator's delete, the prune of the hot table and a history
partition dropped all leave behind the same rows, through ``pqjobs_job_forget()``
(``sql/schema/history.sql``), and none of them an orphan.

An orphan: a row of a table that holds rows of a job (attempts, steps, signals, dependency
edges) whose job is gone; but for an edge to a gone job from a job still there (that job's
record of what it waited for: it goes with it) and the edges of a gone job that is still
its sequence's last job (its place in line, read by the next enqueue).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from django_pqjobs import enqueue_job
from django_pqjobs.models import Dependency, Job, JobAttempt, OperatorAction, Signal, Step
from django_pqjobs.operations import delete_jobs
from django_pqjobs.worker import housekeeping
from tests.helpers import drop_history_partitions

pytestmark = pytest.mark.django_db(transaction=True)

DAY = 86400.0


@pytest.fixture(autouse=True)
def _no_partition_outlives_its_test():
    yield
    drop_history_partitions()


def finished(status: str, ago: float) -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pqjobs_job (job_type, payload, status, attempts, max_attempts, "
            "finished_at) VALUES ('t', '{}', %s, 1, 1, now() - make_interval(secs => %s)) "
            "RETURNING id",
            [status, ago],
        )
        return int(cursor.fetchone()[0])


def orphans() -> list[tuple[Any, ...]]:
    """Every row of a job-holding table whose job is gone (every shelf looked at), but the
    edges that stay by rule (see the module's docstring)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            SELECT 'attempt', a.job_id FROM pqjobs_attempt a
            WHERE NOT EXISTS (SELECT 1 FROM pqjobs_job j WHERE j.id = a.job_id)
            UNION ALL
            SELECT 'step', s.job_id FROM pqjobs_step s
            WHERE NOT EXISTS (SELECT 1 FROM pqjobs_job j WHERE j.id = s.job_id)
            UNION ALL
            SELECT 'signal', s.job_id FROM pqjobs_signal s
            WHERE NOT EXISTS (SELECT 1 FROM pqjobs_job j WHERE j.id = s.job_id)
            UNION ALL
            SELECT 'edge', d.job_id FROM pqjobs_dependency d
            WHERE NOT EXISTS (SELECT 1 FROM pqjobs_job j WHERE j.id = d.job_id)
              AND NOT EXISTS (SELECT 1 FROM pqjobs_sequence q WHERE q.last_job_id = d.job_id)
            """
        )
        return cursor.fetchall()


def scene(ago: float) -> dict[str, int]:
    """A done job ``doomed`` (finished ``ago`` seconds ago) with an attempt, a step, a
    signal and an audit row, that waited for ``before`` and that ``after`` waited for (both
    done just now, so neither prune nor history takes them)."""
    before = finished("done", 0)
    doomed = finished("done", ago)
    after = finished("done", 0)
    JobAttempt.objects.create(job_id=doomed, attempt=1, worker_id="w", outcome="error")
    Step.objects.create(job_id=doomed, name="charge", kind="step", attempt=1)
    Signal.objects.create(job_id=doomed, name="paid")
    Dependency.objects.create(job_id=doomed, depends_on_id=before)
    Dependency.objects.create(job_id=after, depends_on_id=doomed)
    OperatorAction.objects.create(actor="ops", action="retry", job_id=doomed, target="t")
    return {"before": before, "doomed": doomed, "after": after}


def left(ids: dict[str, int]) -> dict[str, Any]:
    """What is left of a scene, by role (the ids differ from scene to scene)."""
    role = {v: k for k, v in ids.items()}
    return {
        "jobs": sorted(role[j] for j in Job.objects.filter(pk__in=ids.values()).values_list(
            "pk", flat=True)),
        "attempts": JobAttempt.objects.filter(job_id__in=ids.values()).count(),
        "steps": Step.objects.filter(job_id__in=ids.values()).count(),
        "signals": Signal.objects.filter(job_id__in=ids.values()).count(),
        "edges": sorted(
            (role[d.job_id], role[d.depends_on_id])
            for d in Dependency.objects.filter(job_id__in=ids.values())
        ),
        "audit": OperatorAction.objects.filter(job_id=ids["doomed"]).exclude(
            action="delete").count(),
    }  # fmt: skip


def by_delete(settings: Any) -> dict[str, int]:
    ids = scene(2 * DAY)
    assert [d.job_id for d in delete_jobs([ids["doomed"]], by="ops")] == [ids["doomed"]]
    return ids


def by_prune(settings: Any) -> dict[str, int]:
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": None}
    ids = scene(2 * DAY)
    assert housekeeping.prune("default", {"done": DAY})["done"] == 1
    return ids


def by_partition_drop(settings: Any) -> dict[str, int]:
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": 600}
    ids = scene(6.5 * DAY)
    assert housekeeping.shelve_finished("default")["done"] == 1
    with connection.cursor() as cursor:
        cursor.execute("SELECT tableoid::regclass::text FROM pqjobs_job WHERE id = %s",
                       [ids["doomed"]])  # fmt: skip
        assert cursor.fetchone()[0] != "pqjobs_job_hot"
    assert housekeeping.prune("default", {"done": 5 * DAY})["done"] == 1
    return ids


WAYS = {"delete": by_delete, "prune": by_prune, "partition drop": by_partition_drop}


@pytest.mark.parametrize("way", list(WAYS))
def test_each_way_a_job_goes_leaves_no_orphan(way, settings):
    ids = WAYS[way](settings)
    assert not Job.objects.filter(pk=ids["doomed"]).exists()
    assert orphans() == []
    assert left(ids) == {
        "jobs": ["after", "before"],
        "attempts": 0,
        "steps": 0,
        "signals": 0,
        # what the gone job waited for goes; the edge of the job that waited for it stays
        # with that job (its record; the endings announcer reads it after a delete)
        "edges": [("after", "doomed")],
        "audit": 1,  # the audit trail keeps its rows
    }


def test_the_three_ways_agree(settings):
    shapes = {way: left(make(settings)) for way, make in WAYS.items()}
    assert shapes["delete"] == shapes["prune"] == shapes["partition drop"]


def test_the_edge_kept_for_a_job_goes_with_that_job(settings):
    settings.PQJOBS = {**settings.PQJOBS, "HISTORY_AFTER": None}
    ids = by_delete(settings)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET finished_at = now() - interval '2 days' WHERE id = %s",
            [ids["after"]],
        )
    assert housekeeping.prune("default", {"done": DAY})["done"] == 1
    assert not Dependency.objects.filter(job_id=ids["after"]).exists()
    assert orphans() == []


def test_a_sequence_job_deleted_in_the_middle_leaves_no_edge_once_settled():
    """Before: the deleted job's own edges stayed for good (only pruning the job they point
    to took them)."""
    a1 = enqueue_job("tests.sequenced", {"account": 1, "n": 1})
    a2 = enqueue_job("tests.sequenced", {"account": 1, "n": 2})
    a3 = enqueue_job("tests.sequenced", {"account": 1, "n": 3})
    assert [d.job_id for d in delete_jobs([a2])] == [a2]
    assert Job.objects.get(pk=a3).status == "waiting"
    # its place in line went to a3 at the commit, and then its edges
    assert set(Dependency.objects.filter(job_id=a3).values_list("depends_on_id", flat=True)) == {
        a1,
        a2,
    }
    assert not Dependency.objects.filter(job_id=a2).exists()
    assert orphans() == []


def test_a_deleted_tail_keeps_its_place_in_line_until_its_sequence_is_forgotten():
    """Before: prune_sequences forgot the sequence and left the tail's edges for good."""
    a1 = enqueue_job("tests.sequenced", {"account": 1, "n": 1})
    a2 = enqueue_job("tests.sequenced", {"account": 1, "n": 2})
    delete_jobs([a2])
    assert list(Dependency.objects.filter(job_id=a2).values_list("depends_on_id", flat=True)) == [
        a1
    ]
    assert housekeeping.prune_sequences("default") == 1
    assert not Dependency.objects.filter(job_id=a2).exists()
    assert orphans() == []


def test_forget_strips_no_job_that_is_still_there():
    """pqjobs_job_forget runs with the owner's rights: ids of jobs still on some shelf are
    left alone, whoever asks."""
    ids = scene(0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pqjobs_job_forget(%s::bigint[])", [list(ids.values())])
        assert cursor.fetchone()[0] == 0
    assert left(ids)["attempts"] == 1 and left(ids)["steps"] == 1
    assert len(left(ids)["edges"]) == 2


@pytest.mark.slow
def test_migration_0037_up_and_down(empty_database):
    """0037 adds pqjobs_job_forget (granted to the roles that may delete jobs) and the
    callers that use it; taken back, the three cascades of 0036 return and it is gone."""
    from tests.integration.test_upgrade_statistics import _connect, _migrate

    role = f"forget_{empty_database[-8:]}"
    _migrate(empty_database, "0036")
    with _connect(empty_database) as db:
        db.execute(f"DROP ROLE IF EXISTS {role}")
        db.execute(f"CREATE ROLE {role} NOLOGIN")
        db.execute(f"GRANT DELETE ON pqjobs_job TO {role}")
    try:
        _migrate(empty_database)
        with _connect(empty_database) as db:
            assert db.execute(
                "SELECT has_function_privilege(%s, 'pqjobs_job_forget(bigint[])', 'EXECUTE'), "
                "has_function_privilege('public', 'pqjobs_job_forget(bigint[])', 'EXECUTE'), "
                "pg_get_functiondef('pqjobs_history_drop(text, date)'::regprocedure) "
                "LIKE '%%pqjobs_job_forget%%'",
                [role],
            ).fetchone() == (True, False, True)
        _migrate(empty_database, "0036")
        with _connect(empty_database) as db:
            assert db.execute(
                "SELECT to_regprocedure('pqjobs_job_forget(bigint[])') IS NULL, "
                "pg_get_functiondef('pqjobs_history_drop(text, date)'::regprocedure) "
                "LIKE '%%pqjobs_job_forget%%', "
                "pg_get_functiondef('pqjobs_settle()'::regprocedure) LIKE '%%forget%%'"
            ).fetchone() == (True, False, False)
        _migrate(empty_database)
    finally:
        with _connect(empty_database) as db:
            db.execute(f"DROP OWNED BY {role}")
            db.execute(f"DROP ROLE {role}")
