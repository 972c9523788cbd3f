"""Sequences (issue 28): the jobs of one key run one at a time, in enqueue order, across
any number of workers; a job that fails for good halts its sequence until an operator
retries or skips it (or, declared so, the sequence goes on)."""

from __future__ import annotations

import itertools
import re
import threading

import pytest
from django.db import connection

from django_pqjobs import (
    InvalidJobOption,
    cancel_job,
    enqueue_job,
    enqueue_many,
    retry_job,
)
from django_pqjobs.models import Job, OperatorAction, WorkerRecord
from django_pqjobs.operations import delete_jobs, skip_jobs
from django_pqjobs.registry import registry
from django_pqjobs.testing import drain
from django_pqjobs.worker.housekeeping import expire_overdue
from tests.helpers import documented_block, make_user, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

GUIDE = "guides/unique-jobs.md"


def statuses(*job_ids: int) -> list[str]:
    found = dict(Job.objects.filter(pk__in=job_ids).values_list("pk", "status"))
    return [found[n] for n in job_ids]


def test_each_job_waits_for_the_one_enqueued_before_it():
    a1, a2, a3 = (enqueue_job("tests.sequenced", {"account": 1, "n": n}) for n in range(3))
    b1 = enqueue_job("tests.sequenced", {"account": 2, "n": 0})
    assert statuses(a1, a2, a3, b1) == ["ready", "waiting", "waiting", "ready"]
    assert set(Job.objects.values_list("sequence_key", flat=True)) == {"account:1", "account:2"}
    ran = [run.job_id for run in drain()]
    assert sorted(ran) == [a1, a2, a3, b1]
    assert [n for n in ran if n != b1] == [a1, a2, a3]


def test_a_literal_sequence_per_call():
    first = enqueue_job("tests.echo", {}, sequence="import:7")
    second = enqueue_job("tests.echo", {}, sequence="import:7")
    assert statuses(first, second) == ["ready", "waiting"]


def test_a_failure_halts_the_sequence_until_it_is_retried():
    a1 = enqueue_job("tests.sequenced", {"account": 1, "fail_until": 1})
    a2 = enqueue_job("tests.sequenced", {"account": 1})
    b1 = enqueue_job("tests.sequenced", {"account": 2})
    drain()
    assert statuses(a1, a2, b1) == ["failed", "waiting", "done"]
    a3 = enqueue_job("tests.sequenced", {"account": 1})  # joins the halted sequence
    assert drain() == [] and statuses(a2, a3) == ["waiting", "waiting"]
    assert retry_job(a1)
    assert [run.job_id for run in drain()] == [a1, a2, a3]  # attempt 2 succeeds, then the rest
    assert statuses(a1, a2, a3) == ["done", "done", "done"]


def test_skip_lets_the_rest_of_a_halted_sequence_go_on():
    a1 = enqueue_job("tests.sequenced", {"account": 1, "fail_until": 5})
    a2 = enqueue_job("tests.sequenced", {"account": 1})
    drain()
    assert skip_jobs([a2], by="ops") == []  # only failed jobs are skipped
    assert skip_jobs([a1], by="ops") == [a1]
    job = Job.objects.get(pk=a1)
    assert job.status == "cancelled" and "fails" in job.last_error  # the error is kept
    assert [run.job_id for run in drain()] == [a2]
    assert OperatorAction.objects.get().action == "skip"


def test_a_sequence_declared_to_continue_goes_on_past_a_failure():
    a1 = enqueue_job("tests.sequenced_continue", {"account": 1, "fail_until": 1})
    a2 = enqueue_job("tests.sequenced_continue", {"account": 1})
    drain()
    assert statuses(a1, a2) == ["failed", "done"]


@pytest.mark.parametrize("how", ["cancel", "expire", "delete"])
def test_a_job_that_leaves_the_middle_hands_its_wait_to_the_next(how):
    a1 = enqueue_job("tests.sequenced", {"account": 1, "n": 1})
    a2 = enqueue_job("tests.sequenced", {"account": 1, "n": 2}, expires_in=60)
    a3 = enqueue_job("tests.sequenced", {"account": 1, "n": 3})
    if how == "cancel":
        assert cancel_job(a2) == "cancelled"
    elif how == "expire":
        with connection.cursor() as cursor:
            cursor.execute("UPDATE pqjobs_job SET expires_at = now() WHERE id = %s", [a2])
        assert expire_overdue("default") == [a2]
    else:
        assert [d.job_id for d in delete_jobs([a2])] == [a2]
    assert statuses(a1, a3) == ["ready", "waiting"]  # a1 has not run yet: a3 waits for it
    assert Job.objects.get(pk=a3).waiting_for == 1
    assert [run.job_id for run in drain()] == [a1, a3]


@pytest.mark.parametrize("how", ["cancel", "delete"])
def test_a_job_enqueued_after_a_tail_that_left_waits_for_what_the_tail_waited_for(how):
    a1 = enqueue_job("tests.sequenced", {"account": 1, "n": 1})
    a2 = enqueue_job("tests.sequenced", {"account": 1, "n": 2})  # the tail, then gone
    if how == "cancel":
        cancel_job(a2)
    else:
        delete_jobs([a2])
    a3 = enqueue_job("tests.sequenced", {"account": 1, "n": 3})
    assert statuses(a1, a3) == ["ready", "waiting"]
    assert [run.job_id for run in drain()] == [a1, a3]
    a4 = enqueue_job("tests.sequenced", {"account": 1, "n": 4})  # after a done tail: first
    assert statuses(a4) == ["ready"]


def test_prune_forgets_a_sequence_whose_last_job_is_gone():
    from django_pqjobs.models import SequenceTail
    from django_pqjobs.worker.housekeeping import prune_sequences

    gone = enqueue_job("tests.sequenced", {"account": 1})
    kept = enqueue_job("tests.sequenced", {"account": 2})
    drain()
    Job.objects.filter(pk=gone).delete()
    assert prune_sequences("default") == 1
    assert list(SequenceTail.objects.values_list("key", "last_job_id")) == [("account:2", kept)]
    assert statuses(enqueue_job("tests.sequenced", {"account": 1})) == ["ready"]


def test_the_order_holds_across_four_workers_and_many_enqueuers():
    """8 enqueuer threads, 6 accounts, 64 jobs, 4 worker processes of one thread each
    (`run_jobs --processes 4 --concurrency 1`): per account, the jobs ran one at a time in
    enqueue (id) order, and more than one worker took part."""

    def enqueue(thread: int) -> None:
        from django.db import connection

        try:
            for n in range(8):
                enqueue_job("tests.sequenced", {"account": (thread + n) % 6, "n": n, "sleep": 0.01})
        finally:
            connection.close()

    with run_jobs("--processes", "4", "--concurrency", "1"):
        wait_for(lambda: WorkerRecord.objects.count() >= 4)
        threads = [threading.Thread(target=enqueue, args=(t,)) for t in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wait_for(lambda: not Job.objects.exclude(status="done").exists())
    by_key: dict[str, list[Job]] = {}
    for job in Job.objects.order_by("pk"):
        by_key.setdefault(job.sequence_key, []).append(job)
    assert len(by_key) == 6
    assert len({job.locked_by for jobs in by_key.values() for job in jobs}) > 1
    for jobs in by_key.values():
        for before, after in itertools.pairwise(jobs):
            assert before.finished_at <= after.locked_at, (before.pk, after.pk)


def test_the_admin_lists_halted_sequences_and_skips_from_the_job_page():
    a1 = enqueue_job("tests.sequenced", {"account": 1, "fail_until": 1})
    a2 = enqueue_job("tests.sequenced", {"account": 1})
    drain()
    client = make_user("ops", "change_job", "view_job")
    listed = client.get("/admin/django_pqjobs/job/?sequence=halted")
    assert listed.status_code == 200
    assert f"/admin/django_pqjobs/job/{a1}/change/" in listed.content.decode()
    assert f"/admin/django_pqjobs/job/{a2}/change/" not in listed.content.decode()
    page = client.get(f"/admin/django_pqjobs/job/{a2}/change/").content.decode()
    assert "its sequence is halted" in page
    assert "halted here" in client.get(f"/admin/django_pqjobs/job/{a1}/change/").content.decode()
    response = client.post(f"/admin/django_pqjobs/job/{a1}/action/skip/")
    assert response.status_code == 302
    assert statuses(a1, a2) == ["cancelled", "ready"]
    refused = client.get("/admin/django_pqjobs/job/?sequence=nonsense")
    assert refused.status_code == 400 and "use halted" in refused.content.decode()


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"sequence": "k", "depends_on": [1]}, "cannot also have depends_on"),
        ({"sequence": "k", "dedupe_key": "x"}, "cannot have a dedupe_key or be unique"),
        ({"sequence": "k", "unique_for": "1h"}, "cannot have a dedupe_key or be unique"),
        ({"sequence": ""}, "sequence"),
        ({"sequence": "a\x00b"}, "sequence"),
    ],
)
def test_bad_sequence_options_are_refused(given, error):
    with pytest.raises(InvalidJobOption, match=re.escape(error)):
        enqueue_job("tests.echo", {}, **given)
    assert not Job.objects.exists()


def test_enqueue_many_refuses_a_sequenced_type_and_bad_declarations_are_refused():
    from django_pqjobs import job

    with pytest.raises(InvalidJobOption, match="enqueue_many cannot apply"):
        enqueue_many("tests.sequenced", [{"account": 1}])
    with pytest.raises(InvalidJobOption, match="sequence_on_failure needs a sequence"):
        job("tests.bad_seq", sequence_on_failure="halt")
    with pytest.raises(InvalidJobOption, match="sequence_on_failure must be one of"):
        job("tests.bad_seq", sequence="k", sequence_on_failure="stop")
    with pytest.raises(InvalidJobOption, match="sequence"):
        enqueue_job("tests.sequenced", {"no_account": 1})
    assert not Job.objects.exists()


def test_the_guide_s_example_runs_as_written():
    code = documented_block(GUIDE, "sequence-example", "python")
    found: dict = {}
    try:
        exec(compile(code, "unique-jobs.md", "exec"), found)
        first, second, other = found["first"], found["second"], found["other"]
        assert statuses(first, second, other) == ["ready", "waiting", "ready"]
        ran = [run.job_id for run in drain()]
        assert ran.index(first) < ran.index(second) and sorted(ran) == [first, second, other]
    finally:
        registry.unregister("ledger.post")
