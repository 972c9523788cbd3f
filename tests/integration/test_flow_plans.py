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
from django.db import connection, transaction

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


def ready_beside():
    """Ready jobs the statistics then know of, as a busy table has: 3,000 without a key and
    500 with a concurrency key; analysed again."""
    enqueue_many("tests.noop", [{}] * 3000, queue="busy")
    enqueue_many("tests.limited", [{"k": n % 50} for n in range(500)], queue="busy")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE pqjobs_job")
        cursor.execute("ANALYZE pqjobs_job_hot")


def written(call) -> tuple[int, int]:
    """Rows of the hot table ``call`` inserted and updated (the counts of this session's
    statistics not yet reported, read before and after, in one transaction)."""
    counts = (
        "SELECT pg_stat_get_xact_tuples_inserted('pqjobs_job_hot'::regclass), "
        "pg_stat_get_xact_tuples_updated('pqjobs_job_hot'::regclass)"
    )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(counts)
        inserted, updated = cursor.fetchone()
        call()
        cursor.execute(counts)
        inserted_after, updated_after = cursor.fetchone()
    return inserted_after - inserted, updated_after - updated


def test_a_job_enqueued_into_a_pause_is_written_once():
    ready_beside()
    assert flow.pause_queue("held")
    # keyed, fair or neither: inserted held, never inserted ready then held by a second write
    assert written(lambda: enqueue_many("tests.noop", [{}] * 2000, queue="held")) == (2000, 0)
    limited = [{"k": n % 50} for n in range(500)]
    assert written(lambda: enqueue_many("tests.limited", limited, queue="held")) == (500, 0)
    fair = [{"tenant": n % 7} for n in range(500)]
    assert written(lambda: enqueue_many("tests.fair_noop", fair, queue="held")) == (500, 0)
    assert statuses("held") == {"blocked": 3000}
    assert set(Job.objects.filter(queue="held").values_list("blocked_by", flat=True)) == {"paused"}
    # beside the pause: inserted ready, nothing more
    assert written(lambda: enqueue_many("tests.noop", [{}] * 2000, queue="open")) == (2000, 0)
    assert statuses("open") == {"ready": 2000}


def test_the_pauses_are_read_once_per_statement_never_per_row_nor_joined():
    ready_beside()
    assert flow.pause_queue("elsewhere")
    beside = planned_inside(lambda: enqueue_many("tests.noop", [{}] * 2000, queue="open"))
    assert flow.pause_queue("held")
    into = planned_inside(lambda: enqueue_many("tests.noop", [{}] * 2000, queue="held"))
    keyed = planned_inside(
        lambda: enqueue_many("tests.limited", [{"k": n % 50} for n in range(500)], queue="held")
    )
    assert statuses("open") == {"ready": 2000}
    assert statuses("held") == {"blocked": 2500}
    for plans in (beside, into, keyed):
        # one reading of the pauses, for the INSERT statement; none per row
        reads = [plan for plan in plans if "pqjobs_pause" in plan]
        assert len(reads) == 1, reads
        assert "set_config('pqjobs.paused'" in reads[0], reads[0]
        for plan in plans:
            # no second write of the new rows, no join of the inserted rows with the table
            assert "blocked_by = 'paused'" not in plan, plan
            assert "Named Tuplestore Scan" not in plan, plan


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
