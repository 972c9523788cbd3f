"""Composition: batches with callbacks, dependencies between jobs, and waiting for results.

The bookkeeping is done by the database at each commit (migration 0013), so these tests
commit (``transaction=True``) and run jobs through ``drain()`` or real workers.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from django_pqjobs import (
    InvalidJobOption,
    JobGraph,
    batch,
    cancel_job,
    chain,
    enqueue_batch,
    enqueue_job,
    enqueue_many,
    enqueue_on_commit,
    get_batch,
    retry_job,
)
from django_pqjobs.models import Batch, Dependency, Job
from django_pqjobs.operations import delete_jobs, retry_jobs
from django_pqjobs.testing import drain, eager
from django_pqjobs.worker.housekeeping import prune, prune_batches

from ..helpers import job_status

pytestmark = pytest.mark.django_db(transaction=True)


def callbacks_of(batch_id: int) -> list[Job]:
    return list(Job.objects.filter(callback_of_id=batch_id).order_by("id"))


# --- batches ---------------------------------------------------------------------------


def test_members_of_a_batch_block_join_it_and_its_callbacks_run_once() -> None:
    with batch(
        on_success="tests.batch_callback",
        on_finish="tests.batch_callback",
        callback_payload={"note": "all in"},
        label="nightly",
    ) as b:
        first = enqueue_job("tests.noop")
        more = enqueue_many("tests.echo", [{"n": 1}, {"n": 2}])
    assert b.job_ids == [first, *more]
    assert set(Job.objects.filter(batch_id=b.id).values_list("id", flat=True)) == set(b.job_ids)
    opened = get_batch(b.id)
    assert (opened.label, opened.total, opened.pending, opened.sealed) == ("nightly", 3, 3, True)
    assert callbacks_of(b.id) == []

    drain(["default"])
    drain()  # the callbacks, enqueued by the last member's commit
    finished = get_batch(b.id)
    assert (finished.pending, finished.done, finished.finishes) == (0, 3, 1)
    assert finished.finished_at is not None
    callbacks = callbacks_of(b.id)
    assert [c.status for c in callbacks] == ["done", "done"]
    assert callbacks[0].result == {
        "batch": b.id,
        "total": 3,
        "done": 3,
        "failed": 0,
        "cancelled": 0,
        "payload": {"note": "all in"},
    }


def test_a_failed_member_fires_the_failure_and_finish_callbacks_not_success() -> None:
    opened = enqueue_batch(
        "tests.noop",
        [{}, {}],
        on_success="tests.batch_callback",
        on_failure="tests.batch_callback",
        on_finish="tests.noop",
    )
    with batch(on_failure="tests.batch_callback") as other:
        enqueue_job("tests.permanent")
    drain()
    assert [c.job_type for c in callbacks_of(opened.id)] == ["tests.batch_callback", "tests.noop"]
    assert get_batch(opened.id).done == 2
    # the success callback went out, not the failure one
    assert callbacks_of(opened.id)[0].result["failed"] == 0
    failure = callbacks_of(other.id)
    assert len(failure) == 1 and failure[0].result["failed"] == 1


def test_retrying_a_failed_member_reopens_the_batch_and_its_callbacks_fire_once_more() -> None:
    with batch(on_failure="tests.noop", on_finish="tests.noop") as b:
        failing = enqueue_job("tests.permanent")
        enqueue_job("tests.noop")
    drain()
    assert len(callbacks_of(b.id)) == 2
    assert get_batch(b.id).finishes == 1

    assert retry_job(failing)
    reopened = get_batch(b.id)
    assert (reopened.pending, reopened.failed, reopened.finished_at) == (1, 0, None)
    drain()
    again = get_batch(b.id)
    assert (again.failed, again.finishes) == (1, 2)
    assert len(callbacks_of(b.id)) == 4  # failure + finish, once per finish


def test_a_batch_enqueued_in_a_transaction_that_rolls_back_leaves_nothing() -> None:
    batches, jobs = Batch.objects.count(), Job.objects.count()
    with pytest.raises(RuntimeError), transaction.atomic():
        with batch(on_success="tests.noop") as b:
            enqueue_job("tests.noop")
            enqueue_many("tests.noop", [{}] * 10)
        assert Batch.objects.filter(pk=b.id).exists()
        raise RuntimeError("the view failed after enqueueing")
    assert (Batch.objects.count(), Job.objects.count()) == (batches, jobs)


def test_an_exception_inside_the_batch_block_enqueues_nothing() -> None:
    jobs = Job.objects.count()
    with pytest.raises(ValueError), batch(on_success="tests.noop"):
        enqueue_job("tests.noop")
        raise ValueError("half-built batch")
    assert Job.objects.count() == jobs and not Batch.objects.exists()


def test_cancelled_and_deleted_members_count_as_finished_but_not_done() -> None:
    with batch(on_success="tests.noop", on_finish="tests.batch_callback") as b:
        keep = enqueue_job("tests.noop")
        cancelled = enqueue_job("tests.noop")
        deleted = enqueue_job("tests.noop")
    cancel_job(cancelled)
    assert [d.job_id for d in delete_jobs([deleted])] == [deleted]
    drain()
    assert job_status(keep) == "done"
    done = get_batch(b.id)
    assert (done.done, done.cancelled, done.pending) == (1, 2, 0)
    assert [c.job_type for c in callbacks_of(b.id)] == ["tests.batch_callback"]


def test_an_empty_batch_finishes_at_once() -> None:
    with batch(on_success="tests.noop") as b:
        pass
    assert get_batch(b.id).finishes == 1
    assert len(callbacks_of(b.id)) == 1


def test_pruning_finished_members_changes_no_count() -> None:
    with batch(on_finish="tests.noop") as b:
        enqueue_many("tests.noop", [{}] * 3)
    drain()
    Job.objects.filter(batch_id=b.id).delete()
    after = get_batch(b.id)
    assert (after.total, after.done, after.pending, after.finishes) == (3, 3, 0, 1)
    assert len(callbacks_of(b.id)) == 1


def test_prune_takes_finished_members_their_edges_and_then_the_emptied_batch() -> None:
    with batch(on_finish="tests.noop") as b:
        first = enqueue_job("tests.noop")
        second = enqueue_job("tests.noop", depends_on=[first])
    still_open = enqueue_batch("tests.noop", [{}], delay=3600)
    drain()
    assert Dependency.objects.count() == 1
    Job.objects.update(finished_at=timezone.now() - timedelta(days=60))
    Batch.objects.filter(pk=b.id).update(finished_at=timezone.now() - timedelta(days=60))
    retention = {"done": 86400.0, "failed": 86400.0, "cancelled": 86400.0, "expired": 86400.0}
    assert prune("default", retention)["done"] == 3  # two members and the callback
    assert Dependency.objects.count() == 0
    assert not Job.objects.filter(pk=second).exists()
    assert prune_batches("default", retention) == 1
    assert list(Batch.objects.values_list("id", flat=True)) == [still_open.id]
    assert prune_batches("default", {**retention, "failed": None}) == 0


def test_bad_batch_input_is_refused_before_anything_is_written() -> None:
    with (
        pytest.raises(InvalidJobOption, match="no handler is registered"),
        batch(on_success="no.such.callback"),
    ):
        pass
    with pytest.raises(InvalidJobOption, match="NUL"), batch(label="a\x00b"):
        pass
    with pytest.raises(InvalidJobOption, match="do not nest"), batch(), batch():
        pass
    with pytest.raises(InvalidJobOption, match="cannot be debounced"), batch():
        enqueue_job("tests.debounced", {})
    with pytest.raises(InvalidJobOption, match="outside the batch"), batch():
        enqueue_on_commit("tests.noop")
    with pytest.raises(InvalidJobOption, match="max_waiting"), batch():
        enqueue_job("tests.capped_skip")
    assert not Batch.objects.exists() and not Job.objects.exists()


# --- dependencies ----------------------------------------------------------------------


def test_a_diamond_runs_in_dependency_order_and_reads_its_dependencies_results() -> None:
    graph = JobGraph()
    graph.add("top", "tests.echo", {"part": "top"})
    graph.add("left", "tests.echo", {"part": "left"}, depends_on=["top"])
    graph.add("right", "tests.echo", {"part": "right"}, depends_on=["top"])
    graph.add("bottom", "tests.dependency_results", depends_on=["left", "right"])
    ids = graph.enqueue()
    assert [job_status(ids[n]) for n in ("top", "left", "right", "bottom")] == [
        "ready",
        "waiting",
        "waiting",
        "waiting",
    ]
    order = [run.job_id for run in drain()]
    assert order.index(ids["top"]) < order.index(ids["left"]) < order.index(ids["bottom"])
    assert order.index(ids["right"]) < order.index(ids["bottom"])
    bottom = Job.objects.get(pk=ids["bottom"])
    assert bottom.status == "done"
    assert sorted(bottom.result) == sorted([str(ids["left"]), str(ids["right"])])
    assert bottom.result[str(ids["left"])]["echo"] == {"part": "left"}


@pytest.mark.slow
def test_a_fan_in_of_a_thousand_into_one() -> None:
    ids = enqueue_many("tests.noop", [{}] * 1000)
    last = enqueue_job("tests.noop", depends_on=ids)
    assert Job.objects.get(pk=last).waiting_for == 1000
    assert Dependency.objects.filter(job_id=last).count() == 1000
    drain(max_jobs=2000)
    assert job_status(last) == "done"


@pytest.mark.parametrize("policy", ["cancel", "run"])
def test_a_dependency_that_fails_for_good_applies_the_policy(policy: str) -> None:
    bad = enqueue_job("tests.permanent")
    good = enqueue_job("tests.noop")
    dependent = enqueue_job("tests.noop", depends_on=[bad, good], on_dependency_failure=policy)
    after = enqueue_job("tests.noop", depends_on=[dependent])
    drain()
    if policy == "cancel":
        cancelled = Job.objects.get(pk=dependent)
        assert cancelled.status == "cancelled"
        assert cancelled.error_type == "DependencyFailed"
        assert f"dependency #{bad} failed" in cancelled.last_error
        assert job_status(after) == "cancelled"  # the cancel cascades
    else:
        assert job_status(dependent) == "done"
        assert job_status(after) == "done"


def test_a_cancelled_or_deleted_dependency_cancels_its_dependents() -> None:
    first = enqueue_job("tests.noop", delay=3600)
    second = enqueue_job("tests.noop", delay=3600)
    on_first = enqueue_job("tests.noop", depends_on=[first])
    on_second = enqueue_job("tests.noop", depends_on=[second])
    cancel_job(first)
    delete_jobs([second])
    assert Job.objects.get(pk=on_first).last_error == f"dependency #{first} was cancelled"
    assert (
        Job.objects.get(pk=on_second).last_error
        == f"dependency #{second} was deleted before it finished"
    )
    delete_jobs([on_first])
    assert not Dependency.objects.filter(job_id=on_first).exists()


def test_dependencies_already_finished_at_enqueue() -> None:
    done = enqueue_job("tests.noop")
    failed = enqueue_job("tests.permanent")
    drain()
    assert job_status(enqueue_job("tests.noop", depends_on=[done])) == "ready"
    refused = enqueue_job("tests.noop", depends_on=[done, failed])
    assert job_status(refused) == "cancelled"
    assert Job.objects.get(pk=refused).last_error == f"dependency #{failed} failed"
    assert (
        job_status(enqueue_job("tests.noop", depends_on=[failed], on_dependency_failure="run"))
        == "ready"
    )


def test_missing_ids_cycles_and_bad_options_are_refused_at_enqueue() -> None:
    existing = enqueue_job("tests.noop")
    jobs = Job.objects.count()
    with pytest.raises(InvalidJobOption, match="no job #999999999"):
        enqueue_job("tests.noop", depends_on=[existing, 999999999])
    for bad in ([True], ["1"], [0], 5, "12", [2**63]):
        with pytest.raises(InvalidJobOption, match="depends_on"):
            enqueue_job("tests.noop", depends_on=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidJobOption, match="on_dependency_failure"):
        enqueue_job("tests.noop", depends_on=[existing], on_dependency_failure="ignore")  # type: ignore[arg-type]
    with pytest.raises(InvalidJobOption, match="dedupe_key"):
        enqueue_job("tests.noop", depends_on=[existing], dedupe_key="k")

    graph = JobGraph()
    graph.add("a", "tests.noop", depends_on=["c"])
    graph.add("b", "tests.noop", depends_on=["a"])
    graph.add("c", "tests.noop", depends_on=["b"])
    with pytest.raises(InvalidJobOption, match="cycle: 'a' -> 'c' -> 'b' -> 'a'"):
        graph.enqueue()
    unknown = JobGraph()
    unknown.add("a", "tests.noop", depends_on=["nope"])
    with pytest.raises(InvalidJobOption, match="'nope', which the graph does not have"):
        unknown.enqueue()
    half = JobGraph()
    half.add("ok", "tests.noop")
    half.add("bad", "tests.noop", depends_on=["ok", 999999999])
    with pytest.raises(InvalidJobOption, match="no job"):
        half.enqueue()
    assert Job.objects.count() == jobs  # nothing of a refused graph is left behind


def test_chain_runs_steps_one_after_another() -> None:
    ids = chain(
        [
            ("tests.echo", {"step": 1}),
            ("tests.echo", {"step": 2}),
            ("tests.dependency_results", None),
        ]
    )
    assert [job_status(i) for i in ids] == ["ready", "waiting", "waiting"]
    order = [run.job_id for run in drain()]
    assert order == ids
    assert list(Job.objects.get(pk=ids[2]).result) == [str(ids[1])]


def test_a_long_chain_is_checked_without_recursion() -> None:
    graph = JobGraph()
    previous: list[str] = []
    for n in range(5000):
        previous = [graph.add(f"n{n}", "tests.noop", depends_on=previous)]
    assert graph.order()[0] == "n0" and graph.order()[-1] == "n4999"


def test_dependents_are_released_inside_a_test_transaction_by_drain() -> None:
    # Django's TestCase never commits: drain() settles what a commit would.
    with transaction.atomic():
        first = enqueue_job("tests.noop")
        second = enqueue_job("tests.noop", depends_on=[first])
        with batch(on_success="tests.noop") as b:
            enqueue_job("tests.noop")
        drain()
        assert job_status(second) == "done"
        assert [c.status for c in callbacks_of(b.id)] == ["done"]
        transaction.set_rollback(True)
    assert connection.in_atomic_block is False


def test_eager_mode_runs_members_then_callbacks() -> None:
    with eager() as runs:
        with batch(on_success="tests.batch_callback") as b:
            enqueue_many("tests.noop", [{}] * 3)
        first = enqueue_job("tests.echo", {"x": 1})
        enqueue_job("tests.dependency_results", depends_on=[first])
    assert [run.outcome for run in runs] == ["done"] * 6
    assert callbacks_of(b.id)[0].result["done"] == 3


@pytest.mark.django_db(transaction=False)
def test_in_a_test_case_transaction_drain_settles_what_a_commit_would() -> None:
    with batch(on_finish="tests.noop") as b:
        member = enqueue_job("tests.noop")
    dependent = enqueue_job("tests.noop", depends_on=[member])
    drain()
    assert job_status(dependent) == "done"
    assert [c.status for c in callbacks_of(b.id)] == ["done"]


def test_retrying_a_failed_dependency_and_its_cancelled_dependent_runs_them_in_order() -> None:
    first = enqueue_job("tests.retry_then_ok", {"succeed_on": 2}, max_attempts=1)
    second = enqueue_job("tests.echo", depends_on=[first])
    drain()
    assert (job_status(first), job_status(second)) == ("failed", "cancelled")
    # The operator retries both at once: the dependent waits for its dependency again.
    assert sorted(r.job_id for r in retry_jobs([second, first])) == sorted([first, second])
    assert (job_status(first), job_status(second)) == ("ready", "waiting")
    assert [run.job_id for run in drain()] == [first, second]
    assert job_status(second) == "done"
    # Retried alone, a dependent whose dependencies are finished runs at once.
    third = enqueue_job("tests.permanent")
    fourth = enqueue_job("tests.noop", depends_on=[third])
    drain()
    assert retry_job(fourth)
    assert job_status(fourth) == "ready"
