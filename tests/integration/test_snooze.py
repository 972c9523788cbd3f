"""Snooze: a handler says "not now, later". The job goes back to ready after the delay, its
attempt not charged, a ``snoozed`` row in its history; past ``SNOOZE_LIMIT`` snoozes in a
row it fails for good."""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import timedelta

import pytest

from django_pqjobs import Snooze, enqueue_job, signals
from django_pqjobs.admin import dashboard
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.statuses import FailureKind
from django_pqjobs.testing import drain
from django_pqjobs.verdicts import classify
from tests.helpers import wait_status

from .tasks_apps import framework

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def outcomes() -> Iterator[list[tuple[int, str]]]:
    """(job id, outcome) of every job_finished, in order."""
    seen: list[tuple[int, str]] = []

    def receiver(sender: str, job: Job, outcome: str, **kwargs: object) -> None:
        seen.append((job.id, outcome))

    signals.job_finished.connect(receiver, dispatch_uid="test_snooze")
    try:
        yield seen
    finally:
        signals.job_finished.disconnect(dispatch_uid="test_snooze")


def history(job_id: int) -> list[tuple[int, str, str]]:
    rows = JobAttempt.objects.filter(job_id=job_id).order_by("id")
    return list(rows.values_list("attempt", "outcome", "error_type"))


def test_snoozes_never_charge_the_attempt(worker_factory, outcomes):
    worker_factory(concurrency=2)
    job_id = enqueue_job("tests.snooze_until", {"times": 3})  # max_attempts=1
    job = wait_status(job_id, "done")
    assert job.attempts == 1 and job.result == {"snoozed": 3, "attempts": 1}
    assert history(job_id) == [(1, "snoozed", "Snooze")] * 3
    assert JobAttempt.objects.filter(job_id=job_id).first().traceback == "not yet (0)"
    assert [outcome for seen_id, outcome in outcomes if seen_id == job_id] == [
        "snoozed",
        "snoozed",
        "snoozed",
        "done",
    ]


def test_a_job_stops_snoozing_at_the_limit_and_fails_clearly(worker_factory, settings, outcomes):
    settings.PQJOBS = {**settings.PQJOBS, "SNOOZE_LIMIT": 2}
    worker_factory()
    job_id = enqueue_job("tests.snooze_until", {"times": 1000})
    job = wait_status(job_id, "failed")
    assert job.attempts == 1 and job.error_type == "SnoozeLimit"
    assert "snoozed 3 times in a row" in job.last_error
    assert "SNOOZE_LIMIT" in job.last_error
    assert history(job_id) == [
        (1, "snoozed", "Snooze"),
        (1, "snoozed", "Snooze"),
        (1, "permanent", "SnoozeLimit"),
    ]
    assert [outcome for seen_id, outcome in outcomes if seen_id == job_id] == [
        "snoozed",
        "snoozed",
        "failed",
    ]


def test_a_snoozed_job_is_due_after_its_delay_and_drain_leaves_it_for_later():
    job_id = enqueue_job("tests.snooze_until", {"times": 1, "delay": 3600})
    before = database_now("default")
    runs = drain(raise_errors=True)  # a snooze is not a failure
    assert [(run.job_id, run.outcome) for run in runs] == [(job_id, "snoozed")]
    job = Job.objects.get(pk=job_id)
    assert job.status == "ready" and job.attempts == 0
    assert before + timedelta(minutes=59) < job.run_after < before + timedelta(minutes=61)
    assert drain() == []  # not due yet
    runs = drain(run_delayed=True)
    assert [run.outcome for run in runs] == ["done"]
    assert Job.objects.get(pk=job_id).result == {"snoozed": 1, "attempts": 1}


def test_the_dashboard_counts_no_snooze_as_a_retry():
    enqueue_job("tests.snooze_until", {"times": 2})
    enqueue_job("tests.fail")  # one failed attempt, then a retry after its backoff
    drain()  # the snoozes have no delay: the job snoozes twice, then is done
    assert JobAttempt.objects.filter(outcome="snoozed").count() == 2
    assert dashboard.collect("default").chart_totals == (1, 0, 1)  # done, failed, retried this hour


def test_a_reason_no_column_takes_as_it_is_is_stored_cleaned_and_capped():
    job_id = enqueue_job("tests.snooze_odd_reason")
    assert [run.outcome for run in drain()] == ["snoozed", "done"]
    [row] = JobAttempt.objects.filter(job_id=job_id)
    # as every error text: its tail kept, the cut said (where a traceback says the most)
    assert row.outcome == "snoozed" and row.traceback.startswith("[... 11989")
    assert "\x00" not in row.traceback and len(row.traceback.encode()) <= 10 * 1024
    # NUL and the lone surrogate written as escapes, as every stored error text has them
    assert row.traceback.endswith(r" not\x00yet \ud800")


def test_a_child_process_snoozes_like_a_thread(worker_factory):
    worker_factory()
    job_id = enqueue_job("tests.iso_snooze_once")
    job = wait_status(job_id, "done")
    assert job.attempts == 1 and job.result["pid"] != os.getpid()
    assert history(job_id) == [(1, "snoozed", "Snooze")]


@pytest.mark.parametrize("delay", [-1, float("nan"), "soon", timedelta(days=365 * 200)])
def test_a_bad_snooze_delay_is_refused_naming_it(delay):
    with pytest.raises(ValueError, match=r"Snooze\(delay\)"):
        Snooze(delay)


def test_a_bad_snooze_delay_fails_the_attempt_like_any_error():
    job_id = enqueue_job("tests.snooze_badly", {"delay": -5})
    [run] = drain()
    assert run.outcome == "failed"
    job = Job.objects.get(pk=job_id)
    assert job.error_type == "ValueError" and "Snooze(delay)" in job.last_error
    assert history(job_id) == [(1, "error", "ValueError")]


def test_the_verdict_of_a_snooze_gives_the_attempt_back_after_its_delay():
    verdict = classify(Snooze(timedelta(minutes=5)))
    assert (verdict.failure, verdict.then, verdict.delay) == (FailureKind.SNOOZED, "release", 300)
    assert verdict.error == "snoozed for 5 minutes"


# --- a task of Django's Tasks framework ---------------------------------------------------------

_snoozed_once: set[tuple[str, int]] = set()


def _snooze_once(family: str, n: int) -> int:
    if (family, n) not in _snoozed_once:
        _snoozed_once.add((family, n))
        raise Snooze(0, reason="once")
    return n * 2


# one function per framework: a job type (the task's path) belongs to one task
def snooze_once_builtin(n: int) -> int:
    return _snooze_once("django.tasks", n)


def snooze_once_backport(n: int) -> int:
    return _snooze_once("django_tasks", n)


def test_a_task_snoozes_like_a_job(tasks):
    """The default test backend allows one attempt: a snooze that counted would fail it."""
    fw = framework(tasks.FAMILY)
    func = snooze_once_builtin if tasks.FAMILY == "django.tasks" else snooze_once_backport
    result = fw.task(func).enqueue(21)
    assert [run.outcome for run in drain(raise_errors=True)] == ["snoozed", "done"]
    job = Job.objects.get(pk=int(result.id))
    assert (job.status, job.attempts, job.max_attempts) == ("done", 1, 1)
    assert history(job.id) == [(1, "snoozed", "Snooze")]
    result.refresh()
    assert result.status is fw.TaskResultStatus.SUCCESSFUL and result.return_value == 42
    assert result.attempts == 1 and result.errors == []
