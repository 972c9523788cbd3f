"""Flow control's statements on an analysed table: the plans of the enqueue triggers and
the flow sweep stay linear whatever ANALYZE saw (issue 40).

The trap: ANALYZE (autovacuum runs it on every real table) sees 100,000 finished jobs and
no ready one; the statements are then planned as if no job were ready, and with thousands
ready a statement driven from the ready jobs runs in quadratic time. These tests load such
a table and check the shape of each plan (auto_explain), which fails on the quadratic plan
however loaded the machine is.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_pqjobs import enqueue_many, flow, transitions
from django_pqjobs.models import Job
from tests.helpers import plan_of, planned_inside

pytestmark = pytest.mark.django_db(transaction=True)
DB = "default"
FINISHED = 100_000


@pytest.fixture(autouse=True)
def analysed_table():
    """100,000 finished jobs, analysed: the statistics say no job is ready."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO pqjobs_job (job_type, queue, payload, status, attempts, "
            "max_attempts, finished_at) "
            "SELECT 't', 'default', '{}', 'done', 1, 1, now() FROM generate_series(1, %s)",
            [FINISHED],
        )
        cursor.execute("ANALYZE pqjobs_job")
        cursor.execute("ANALYZE pqjobs_job_hot")


def statuses(queue: str) -> dict[str, int]:
    rows = Job.objects.filter(queue=queue).values_list("status", flat=True)
    return {status: list(rows).count(status) for status in set(rows)}


def test_a_pause_holds_only_its_own_new_jobs_by_primary_key():
    # ready jobs the statistics know nothing of, for a plan driven from them to walk
    enqueue_many("tests.noop", [{}] * 3000, queue="busy")
    assert flow.pause_queue("elsewhere")
    beside = planned_inside(lambda: enqueue_many("tests.noop", [{}] * 2000, queue="open"))
    assert flow.pause_queue("held")
    into = planned_inside(lambda: enqueue_many("tests.noop", [{}] * 2000, queue="held"))
    assert statuses("open") == {"ready": 2000}
    assert statuses("held") == {"blocked": 2000}
    assert set(Job.objects.filter(queue="held").values_list("blocked_by", flat=True)) == {"paused"}
    for plan in beside + into:
        # the inserted rows (the transition table) are never joined with the job table
        assert not ("Named Tuplestore Scan" in plan and "pqjobs_job_hot" in plan), plan
    # beside a pause: nothing to hold, no statement on the job table
    assert not [plan for plan in beside if "blocked_by = 'paused'" in plan]
    held = plan_of(into, "blocked_by = 'paused'")
    assert "Index Scan using pqjobs_job_pkey" in held, held
    assert "Seq Scan" not in held, held


@pytest.mark.parametrize(
    ("job_type", "payload", "index"),
    [
        ("tests.limited", lambda n: {"k": n % 20}, "pqjobs_job_ready_key"),
        ("tests.rated", lambda n: {}, "pqjobs_job_ready_rate"),
    ],
)
def test_the_admission_counts_read_their_key_s_index(job_type, payload, index):
    enqueue_many("tests.noop", [{}] * 3000, queue="busy")  # ready jobs of no key
    plans = planned_inside(lambda: enqueue_many(job_type, [payload(n) for n in range(500)]))
    counts = [plan for plan in plans if ") ahead" in plan]
    assert counts
    for plan in counts:
        # not the claim's index of every ready job, filtered row by row
        assert index in plan and "pqjobs_job_claim" not in plan, plan


@pytest.mark.parametrize(
    ("job_type", "payload", "promote", "index"),
    [
        (
            "tests.limited",
            lambda n: {"k": n % 20},
            transitions.promote_limit_blocked,
            "pqjobs_job_ready_key",
        ),
        ("tests.rated", lambda n: {}, transitions.promote_rate_blocked, "pqjobs_job_ready_rate"),
    ],
)
def test_the_flow_sweep_counts_read_their_key_s_index(job_type, payload, promote, index):
    enqueue_many("tests.noop", [{}] * 3000, queue="busy")
    enqueue_many(job_type, [payload(n) for n in range(500)])
    assert Job.objects.filter(status="blocked").exists()
    plans = planned_inside(lambda: promote(DB))
    sweep = plan_of(plans, "promoted AS")
    assert index in sweep and "pqjobs_job_claim" not in sweep, sweep
