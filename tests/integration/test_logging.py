"""What the worker logs: quiet at the default verbosity, structured fields on every record."""

from __future__ import annotations

import logging

import pytest
from django.test import override_settings

from django_pqjobs import enqueue_job
from tests.helpers import run_jobs, wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)

JOB_FIELDS = {"job_id", "job_type", "queue", "attempt", "outcome", "duration_ms"}


def job_records(caplog: pytest.LogCaptureFixture, job_id: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "job_id", None) == job_id]


def test_failures_and_retries_are_logged_with_structured_fields_successes_are_not(
    worker_factory, caplog
):
    caplog.set_level(logging.INFO, logger="django_pqjobs")
    done = enqueue_job("tests.noop", queue="q1")
    retried = enqueue_job("tests.retry_then_ok", {"succeed_on": 2}, queue="q1")
    failed = enqueue_job("tests.permanent", queue="q2")
    worker_factory(concurrency=2, queues=["q1", "q2"])
    wait_status(done, "done")
    wait_status(retried, "done")
    wait_status(failed, "failed")
    wait_for(lambda: job_records(caplog, failed))

    assert job_records(caplog, done) == []  # no line per successful job by default
    (retry,) = job_records(caplog, retried)  # its second attempt succeeded: one line
    assert retry.levelno == logging.WARNING
    assert {k: getattr(retry, k) for k in JOB_FIELDS - {"duration_ms"}} == {
        "job_id": retried,
        "job_type": "tests.retry_then_ok",
        "queue": "q1",
        "attempt": 1,
        "outcome": "retry",
    }
    assert isinstance(retry.duration_ms, int) and retry.error == "not yet"
    assert f"job {retried} tests.retry_then_ok attempt 1/5 failed" in retry.getMessage()

    (final,) = job_records(caplog, failed)
    assert final.levelno == logging.ERROR
    assert (final.outcome, final.queue, final.attempt) == ("failed", "q2", 1)
    assert "this will never work" in final.getMessage() and "this will never work" in final.error


def test_successes_are_logged_when_asked(worker_factory, caplog):
    caplog.set_level(logging.INFO, logger="django_pqjobs")
    job_id = enqueue_job("tests.noop", queue="loud")
    worker_factory(queues=["loud"], log_successes=True)
    wait_status(job_id, "done")
    (record,) = wait_for(lambda: job_records(caplog, job_id))
    assert record.levelno == logging.INFO
    assert set(vars(record)) >= JOB_FIELDS
    assert (record.outcome, record.job_type, record.attempt) == ("done", "tests.noop", 1)
    assert f"job {job_id} tests.noop attempt 1/5 done in" in record.getMessage()


def test_the_setting_turns_success_lines_on(worker_factory, caplog):
    caplog.set_level(logging.INFO, logger="django_pqjobs")
    with override_settings(PQJOBS={"LOG_SUCCESSES": True}):
        job_id = enqueue_job("tests.noop", queue="loud")
        worker_factory(queues=["loud"])
        wait_status(job_id, "done")
        assert wait_for(lambda: job_records(caplog, job_id))[0].outcome == "done"


def test_the_worker_logs_a_periodic_summary(worker_factory, caplog):
    caplog.set_level(logging.INFO, logger="django_pqjobs")

    def summaries() -> list[logging.LogRecord]:
        return [r for r in caplog.records if hasattr(r, "jobs_per_s")]

    with override_settings(PQJOBS={"LOG_SUMMARY_INTERVAL": 0.5, "POLL_INTERVALS": [0.2]}):
        ids = [enqueue_job("tests.noop", queue="sum") for _ in range(5)]
        ids.append(enqueue_job("tests.permanent", queue="sum"))
        worker = worker_factory(concurrency=2, queues=["sum"])
        for job_id in ids:
            wait_status(job_id, "done", "failed")
        records = wait_for(summaries)
    counted: dict[str, int] = {}
    for record in summaries():
        for outcome, n in record.outcomes.items():
            counted[outcome] = counted.get(outcome, 0) + n
        assert record.worker_id == worker.worker_id and record.interval_s > 0
    assert counted == {"done": 5, "failed": 1}
    assert "attempts in the last" in records[0].getMessage()


def test_run_jobs_at_the_default_verbosity_prints_no_line_per_successful_job():
    ok = [enqueue_job("tests.noop", queue="cli") for _ in range(3)]
    bad = enqueue_job("tests.permanent", queue="cli")
    with run_jobs("--burst", "--queue", "cli") as worker:
        assert worker.wait(60) == 0
        quiet = worker.output()
    assert "starting" in quiet and "stopped after 4 attempts (3 done, 1 failed)" in quiet
    assert f"job {bad} tests.permanent attempt 1/5 failed" in quiet
    assert not any(f"job {job_id} tests.noop" in quiet for job_id in ok)

    again = enqueue_job("tests.noop", queue="cli")
    with run_jobs("--burst", "--queue", "cli", "-v", "2") as worker:
        assert worker.wait(60) == 0
        assert f"job {again} tests.noop attempt 1/5 done in" in worker.output()
