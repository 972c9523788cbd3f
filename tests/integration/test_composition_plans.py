"""The statement trigger behind batches and dependencies (``pqjobs_note_changes()``,
migration 0015) on a connection that lives long.

PL/pgSQL keeps the trigger's plans for the server session, made for the first statement
that fired it there. Before, its note joined the old and new rows: planned for one row, the
join was a nested loop that a later bulk change ran over every pair of rows (4 s for 10,000
batch members, hours for a million); planned for a bulk change, it was compiled by JIT at
every later claim. These tests read the plans with auto_explain.
"""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_pqjobs import batch, enqueue_job, enqueue_many
from django_pqjobs.models import Batch
from django_pqjobs.operations import cancel_jobs

from ..helpers import planned_inside

pytestmark = pytest.mark.django_db(transaction=True)

NOTE = "INSERT INTO public.pqjobs_settle"  # the test database keeps its tables in public
JOINS = ("Nested Loop", "Hash Join", "Merge Join")


def members(n: int) -> list[int]:
    with batch(label=f"{n} members") as b:
        enqueue_many("tests.noop", [{} for _ in range(n)])
    return b.job_ids


def notes_while(call) -> list[str]:
    return [plan for plan in planned_inside(call) if NOTE in plan]


def cancel_each(*statements: list[int]) -> None:
    for ids in statements:
        with transaction.atomic():
            assert len(cancel_jobs(ids).cancelled) == len(ids)


@pytest.mark.parametrize("sizes", [(1, 3000), (3000, 1)], ids=["small-first", "bulk-first"])
def test_a_note_has_no_join_whatever_size_its_plan_was_made_for(sizes) -> None:
    first, second = (members(n) for n in sizes)
    notes = notes_while(lambda: cancel_each(first, second))
    assert len(notes) == 2
    for plan in notes:
        assert not any(join in plan for join in JOINS), plan
    for n in sizes:
        counted = Batch.objects.get(total=n)
        assert (counted.pending, counted.cancelled) == (0, n)


def test_no_note_is_compiled_by_jit() -> None:
    """``jit_above_cost = 0`` stands in for a plan made for a bulk change (whose cost passed
    the server's threshold): the note's plan is kept for the session, so it would be
    compiled again at every statement after it."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_jit_available()")
        if not cursor.fetchone()[0]:
            pytest.skip("this server has no JIT")
    ids = members(3)

    def cancel_with_jit_everywhere() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SET jit = on; SET jit_above_cost = 0")
        cancel_each(ids)

    notes = notes_while(cancel_with_jit_everywhere)
    assert notes and not any("JIT" in plan for plan in notes), notes


def test_statements_that_change_no_batch_member_or_prerequisite_note_nothing() -> None:
    """The claim and completion of plain jobs (the hot path) stop at one scan of the new
    rows: the note is neither planned nor run."""
    plain = [enqueue_job("tests.noop") for _ in range(50)]
    in_batch = members(2)

    def changes() -> None:
        with connection.cursor() as cursor:
            cursor.execute("UPDATE pqjobs_job SET updated_at = now() WHERE id = ANY(%s)", [plain])
        cancel_each(plain)

    assert notes_while(changes) == []
    assert len(notes_while(lambda: cancel_each(in_batch))) == 1


def test_deleting_active_members_small_then_many_on_one_connection_is_counted() -> None:
    small, bulk = members(1), members(2000)

    def delete_each() -> None:
        for ids in (small, bulk):
            with connection.cursor() as cursor:
                cursor.execute("DELETE FROM pqjobs_job WHERE id = ANY(%s)", [ids])

    assert len(notes_while(delete_each)) == 2
    for n in (1, 2000):
        emptied = Batch.objects.get(total=n)  # a batch outlives its deleted members
        assert (emptied.pending, emptied.cancelled) == (0, n)
