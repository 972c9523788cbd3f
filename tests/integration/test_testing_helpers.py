"""django_pqjobs.testing: drain, assertions, eager mode, schedules, and the pytest fixtures."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from django.db import connection, transaction

from django_pqjobs import enqueue_job, enqueue_on_commit, testing
from django_pqjobs.models import Job
from tests.helpers import ROOT, bound, wait_status
from tests.testapp.models import Counter, Effect


@pytest.mark.django_db
def test_drain_runs_due_jobs_in_the_tests_transaction_and_reports_each_attempt():
    ok = enqueue_job("tests.effect")
    chained = enqueue_job("tests.chain")
    bad = enqueue_job("tests.permanent")
    later = enqueue_job("tests.noop", delay=3600)
    runs = testing.drain()
    by_job = {run.job_id: run for run in runs}
    assert by_job[ok].outcome == "done" and by_job[ok].succeeded
    assert (
        by_job[bad].outcome == "failed"
        and by_job[bad].error == "PermanentError: this will never work"
    )
    child = Job.objects.get(parent_id=chained)
    assert by_job[child.pk].outcome == "done"  # jobs a handler enqueued ran too
    assert later not in by_job and Job.objects.get(pk=later).status == "ready"
    assert Effect.objects.filter(key=f"job:{ok}").exists()  # seen uncommitted, in this test
    assert testing.drain() == []


@pytest.mark.django_db
def test_drain_runs_retries_with_run_delayed_and_can_raise():
    flaky = enqueue_job("tests.fail")  # max_attempts=3, backoff 10 s then 20 s
    runs = testing.drain()
    assert [(r.attempt, r.outcome) for r in runs] == [(1, "retry")]
    runs = testing.drain(run_delayed=True)
    assert [(r.attempt, r.outcome) for r in runs] == [(2, "retry"), (3, "failed")]
    assert Job.objects.get(pk=flaky).failed_attempts.count() == 3
    enqueue_job("tests.permanent")
    with pytest.raises(testing.JobsFailed, match="PermanentError: this will never work"):
        testing.drain(raise_errors=True)


@pytest.mark.django_db
def test_drain_runs_atomic_isolated_and_async_jobs_in_process():
    atomic = enqueue_job("tests.atomic_counter", {"name": "a"})
    isolated = enqueue_job("tests.iso_echo", {"x": 1})
    coro = enqueue_job("tests.async_echo", {"y": 2})
    assert {r.job_id: r.outcome for r in testing.drain()} == {
        atomic: "done",
        isolated: "done",
        coro: "done",
    }
    assert Counter.objects.get(name="a").value == 1
    assert Job.objects.get(pk=isolated).result["pid"] == os.getpid()
    assert Job.objects.get(pk=coro).result == {"async": True, "payload": {"y": 2}}


@pytest.mark.django_db
def test_drain_stops_a_job_that_keeps_enqueueing():
    for _ in range(5):
        enqueue_job("tests.noop")
    with pytest.raises(testing.TooManyJobs):
        testing.drain(max_jobs=3)
    assert Job.objects.filter(status="ready").count() == 2
    assert not Job.objects.filter(status="running").exists()


@pytest.mark.django_db
@pytest.mark.usefixtures("unknown_job_types_allowed")
def test_assert_enqueued_matches_type_payload_subset_count_and_queue():
    enqueue_job("send", {"to": "a@x", "meta": {"lang": "fr", "n": 1}}, queue="emails")
    enqueue_job("send", {"to": "b@x", "meta": {"lang": "en"}}, queue="emails")
    (found,) = testing.assert_enqueued("send", {"meta": {"lang": "fr"}})
    assert found.payload["to"] == "a@x"
    assert len(testing.assert_enqueued("send", count=2, queue="emails")) == 2
    testing.assert_not_enqueued("send", {"to": "c@x"})
    with pytest.raises(AssertionError, match=r"expected 1 job\(s\) of type 'send', found 2"):
        testing.assert_enqueued("send", count=1)
    with pytest.raises(AssertionError, match=r"enqueued: 'send' .*'to': 'a@x'"):
        testing.assert_enqueued("receive")
    with pytest.raises(AssertionError, match="expected no job of type 'send'"):
        testing.assert_not_enqueued("send", queue="emails")


@pytest.mark.django_db
def test_eager_runs_jobs_at_enqueue_and_after_commit(django_capture_on_commit_callbacks):
    with testing.eager() as runs:
        now = enqueue_job("tests.echo", {"n": 1})
        assert [(r.job_id, r.outcome) for r in runs] == [(now, "done")]
        with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
            later = enqueue_job("tests.echo", {"n": 2})
            assert len(runs) == 1  # not before the commit
        assert runs[-1].job_id == later
        with django_capture_on_commit_callbacks(execute=True):
            enqueue_on_commit("tests.chain")
        chain = Job.objects.get(job_type="tests.chain")
        assert Job.objects.get(parent_id=chain.pk).status == "done"
    enqueue_job("tests.echo", {"n": 3})  # eager mode is over
    assert Job.objects.get(payload={"n": 3}).status == "ready"


@pytest.mark.django_db(transaction=True)
def test_eager_in_a_real_transaction_runs_after_commit_and_not_on_rollback():
    with testing.eager() as runs:
        with transaction.atomic():
            enqueue_job("tests.echo", {"n": 1})
            assert runs == []
        assert len(runs) == 1
        with pytest.raises(ZeroDivisionError), transaction.atomic():
            enqueue_job("tests.echo", {"n": 2})
            1 / 0  # noqa: B018
        assert len(runs) == 1 and not Job.objects.filter(payload={"n": 2}).exists()


@pytest.mark.django_db
def test_trigger_schedule_enqueues_a_declared_schedule(settings):
    settings.PQJOBS = {
        **settings.PQJOBS,
        "SCHEDULES": [{"name": "nightly", "job_type": "tests.echo", "cron": "0 3 * * *"}],
    }
    job_id = testing.trigger_schedule("nightly")
    assert testing.drain()[0].job_id == job_id
    with pytest.raises(AssertionError, match="no schedule named 'weekly'"):
        testing.trigger_schedule("weekly")


@pytest.mark.slow
def test_the_example_projects_tests_use_the_pytest_plugin(tmp_path):
    """The sample tests in testproject/ run with the plugin's fixtures, on a database of
    their own (test_<name>_example)."""
    url = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/pqjobs")
    name = connection.settings_dict["NAME"].removeprefix("test_")
    env = {
        **os.environ,
        "DATABASE_URL": url.rsplit("/", 1)[0] + f"/{name}_example",
        "DJANGO_SETTINGS_MODULE": "config.settings",
    }
    env.pop("PQJOBS_TEST_DATABASE", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--create-db"],
        cwd=ROOT / "testproject",
        env=env,
        capture_output=True,
        text=True,
        timeout=bound(300),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout


# The same jobs, drained in the test and run by a worker: the same rows and history.
SAME_JOBS = [
    ("tests.retry_then_ok", {"succeed_on": 3}),
    ("tests.permanent", {}),
    ("tests.iso_raise", {}),  # isolated: a child in the worker, the test's thread in drain
    ("tests.iso_retry", {}),
    ("tests.lose_connection", {"lose": 1}),
    ("tests.no_such_type", {}),
]


def _rows_and_history(ids: list[int]) -> list[tuple[object, ...]]:
    from django_pqjobs.models import JobAttempt

    rows = []
    for job_id in ids:
        job = Job.objects.get(pk=job_id)
        history = list(
            JobAttempt.objects.filter(job_id=job_id)
            .order_by("id")
            .values_list("attempt", "outcome", "error_type")
        )
        rows.append(
            (job.job_type, job.status, job.attempts, job.max_attempts, job.error_type,
             job.result, history)
        )  # fmt: skip
    return rows


@pytest.mark.django_db(transaction=True)
def test_drain_and_a_worker_leave_the_same_rows_and_history(
    worker_factory, unknown_job_types_allowed
):
    drained = [enqueue_job(job_type, payload) for job_type, payload in SAME_JOBS]
    testing.drain(run_delayed=True)
    by_drain = _rows_and_history(drained)
    Effect.objects.all().delete()  # tests.lose_connection counts its runs in Effect rows
    worked = [enqueue_job(job_type, payload) for job_type, payload in SAME_JOBS]
    worker_factory(concurrency=2)
    for job_id in worked:
        wait_status(job_id, "done", "failed")
    assert _rows_and_history(worked) == by_drain
