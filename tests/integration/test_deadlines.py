"""Deadlines (issue 28): a job not started by its deadline ends ``expired`` instead of
running late, from every status it can wait in; no attempt ever starts after it."""

from __future__ import annotations

import re
import time
from datetime import timedelta

import pytest
from django.db import DatabaseError, connection
from django.urls import reverse
from django.utils import timezone

from django_pqjobs import (
    InvalidJobOption,
    batch,
    enqueue_job,
    enqueue_many,
    get_batch,
    monitoring,
    retry_job,
)
from django_pqjobs.models import Job
from django_pqjobs.registry import registry
from django_pqjobs.testing import drain
from django_pqjobs.worker.claiming import claim_jobs
from django_pqjobs.worker.housekeeping import expire_overdue
from tests.helpers import documented_block, make_user, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

GUIDE = "guides/unique-jobs.md"


def overdue(*job_ids: int) -> None:
    """Move the jobs' deadlines into the past, as if the time had come."""
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE pqjobs_job SET expires_at = now() - interval '1 second' WHERE id = ANY(%s)",
            [list(job_ids)],
        )


def test_expires_in_counts_from_when_the_job_is_due():
    now = timezone.now()
    job_id = enqueue_job("tests.echo", {}, delay=60, expires_in="10m")
    job = Job.objects.get(pk=job_id)
    assert job.expires_at - job.run_after == timedelta(minutes=10)
    assert job.run_after - now > timedelta(seconds=59)
    typed = Job.objects.get(pk=enqueue_job("tests.expiring", {}))
    assert typed.expires_at - typed.run_after == timedelta(seconds=0.5)  # the type's


def test_the_claim_never_starts_a_job_past_its_deadline():
    late = enqueue_job("tests.echo", {"n": 1}, expires_in=60)
    fine = enqueue_job("tests.echo", {"n": 2}, expires_in=60)
    overdue(late)
    claimed = claim_jobs("default", "w1", None, 10).jobs
    assert [j.id for j in claimed] == [fine]
    assert Job.objects.get(pk=late).status == "ready"  # left for the sweep


@pytest.mark.parametrize("status", ["ready", "delayed", "blocked", "waiting"])
def test_the_sweep_expires_a_job_that_was_not_started(status):
    if status == "waiting":
        first = enqueue_job("tests.echo", {}, delay=3600)
        job_id = enqueue_job(
            "tests.echo", {}, depends_on=[first], deadline=timezone.now() + timedelta(hours=1)
        )
    else:
        job_id = enqueue_job(
            "tests.echo", {}, delay=3600 if status == "delayed" else 0, expires_in=60
        )
    if status == "blocked":
        Job.objects.filter(pk=job_id).update(status="blocked", blocked_by="paused")
    assert Job.objects.get(pk=job_id).status == ("ready" if status == "delayed" else status)
    overdue(job_id)
    assert expire_overdue("default") == [job_id]
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.error_type, job.attempts) == ("expired", "Expired", 0)
    assert job.finished_at is not None
    assert job.last_error.startswith("not started by its deadline")
    assert expire_overdue("default") == []  # once


def test_a_running_job_is_never_expired_and_a_retry_past_the_deadline_is():
    job_id = enqueue_job("tests.echo", {}, expires_in=60)
    claim_jobs("default", "w1", None, 1)
    overdue(job_id)
    assert expire_overdue("default") == []
    assert Job.objects.get(pk=job_id).status == "running"
    # its attempt failed and it waits for a retry: that retry would start late
    Job.objects.filter(pk=job_id).update(status="ready")
    assert expire_overdue("default") == [job_id]


def test_dependents_of_an_expired_job_are_cancelled_and_batches_count_it_as_cancelled():
    first = enqueue_job("tests.echo", {}, delay=3600, expires_in=60)
    second = enqueue_job("tests.echo", {}, depends_on=[first])
    with batch() as opened:
        member = enqueue_job("tests.echo", {}, delay=3600, expires_in=60)
    overdue(first, member)
    assert expire_overdue("default") == [first, member]
    dependent = Job.objects.get(pk=second)
    assert (dependent.status, dependent.error_type) == ("cancelled", "DependencyFailed")
    assert dependent.last_error == f"dependency #{first} expired"
    counted = get_batch(opened.id)
    assert (counted.pending, counted.cancelled, counted.failed) == (0, 1, 0)


def test_the_admin_metrics_and_dashboard_show_expired_jobs():
    waiting = enqueue_job("tests.echo", {}, expires_in=60)
    expired = enqueue_job("tests.echo", {}, expires_in=60)
    overdue(expired)
    expire_overdue("default")
    client = make_user("ops", "view_job")
    listed = client.get("/admin/django_pqjobs/job/?status__exact=expired").content.decode()
    assert f"/admin/django_pqjobs/job/{expired}/change/" in listed
    assert f"/admin/django_pqjobs/job/{waiting}/change/" not in listed
    page = client.get(f"/admin/django_pqjobs/job/{waiting}/change/").content.decode()
    assert "must start by" in page and "no attempt starts after it" in page
    dashboard = client.get(reverse("admin:django_pqjobs_job_dashboard")).content.decode()
    assert "expired 1" in dashboard
    counts = {(d.status, d.count) for d in monitoring.depth("default")}
    assert ("expired", 1) in counts


def test_a_worker_expires_overdue_jobs_and_runs_the_rest():
    with connection.cursor() as cursor:  # a paused queue: its jobs wait past their deadline
        cursor.execute(
            "INSERT INTO pqjobs_pause (kind, name, paused_at) VALUES ('queue', 'slow', now())"
        )
    stuck = enqueue_job("tests.expiring", {}, queue="slow")
    with run_jobs("--concurrency", "2", "--queue", "slow", "--queue", "default"):
        wait_for(lambda: Job.objects.get(pk=stuck).status == "expired")
        fine = enqueue_job("tests.expiring", {}, expires_in="30s")
        wait_for(lambda: Job.objects.get(pk=fine).status == "done")
    assert Job.objects.get(pk=stuck).attempts == 0


def test_drain_expires_and_retry_clears_the_deadline():
    job_id = enqueue_job("tests.echo", {}, expires_in=60)
    overdue(job_id)
    assert drain() == []
    assert Job.objects.get(pk=job_id).status == "expired"
    assert retry_job(job_id)
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.expires_at) == ("ready", None)
    assert [run.outcome for run in drain()] == ["done"]


def test_enqueue_many_gives_each_job_the_deadline():
    ids = enqueue_many("tests.echo", [{"n": 1}, {"n": 2}], expires_in="5m", delay=10)
    for job in Job.objects.filter(pk__in=ids):
        assert job.expires_at - job.run_after == timedelta(minutes=5)


def test_the_sql_function_takes_a_deadline_and_refuses_a_bad_one():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pqjobs_enqueue('tests.echo', 'default', '{}', 0, 1, NULL, 0, NULL, NULL, "
            "NULL, NULL, NULL, p_expires_in => 30)"
        )
        (job_id,) = cursor.fetchone()
    job = Job.objects.get(pk=job_id)
    assert job.expires_at - job.run_after == timedelta(seconds=30)
    with pytest.raises(Exception, match="could never start"), connection.cursor() as cursor:
        cursor.execute(
            "SELECT pqjobs_enqueue('tests.echo', 'default', '{}', 0, 1, NULL, 60, NULL, NULL, "
            "NULL, NULL, NULL, p_expires_at => now())"
        )


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ("p_expires_in => -5", "expires_in must be more than 0 seconds"),
        ("p_expires_in => 'NaN'", "expires_in must be more than 0 seconds"),
        ("p_expires_in => 4e9", "expires_in must be more than 0 seconds"),
        ("p_expires_at => '10000-01-01'", "expires_at must be between the years 1 and 9999"),
        ("p_expires_at => now() + interval '1 hour', p_expires_in => 5", "not both"),
    ],
)
def test_the_sql_function_names_the_deadline_it_refuses(arguments, error):
    with (
        pytest.raises(DatabaseError, match=re.escape(error)) as refused,
        connection.cursor() as cursor,
    ):
        cursor.execute(
            "SELECT pqjobs_enqueue('tests.echo', 'default', '{}', 0, 1, NULL, 0, NULL, NULL, "
            f"NULL, NULL, NULL, {arguments})"
        )
    if error != "not both":
        assert "not both" not in str(refused.value)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("given", "error"),
    [
        ({"expires_in": 0}, "expires_in"),
        ({"expires_in": "soon"}, "expires_in"),
        ({"expires_in": float("nan")}, "expires_in"),
        ({"expires_in": 5, "deadline": timezone.now() + timedelta(hours=1)}, "not both"),
        ({"deadline": "tomorrow"}, "deadline must be a datetime"),
        ({"deadline": timezone.now() - timedelta(seconds=1)}, "could never start"),
        ({"deadline": timezone.now() + timedelta(seconds=30), "delay": 60}, "could never start"),
    ],
)
def test_bad_deadlines_are_refused_by_name(given, error):
    with pytest.raises(InvalidJobOption, match=re.escape(error)):
        enqueue_job("tests.echo", {}, **given)
    assert not Job.objects.exists()


def test_a_schedule_s_tick_gets_its_type_s_deadline():
    from django_pqjobs.models import Schedule
    from django_pqjobs.schedules.scheduler import Scheduler

    Schedule.objects.create(
        name="tick", job_type="tests.expiring", interval_seconds=60, next_run_at=timezone.now()
    )
    Scheduler("default").run_pass()
    tick = Job.objects.get(job_type="tests.expiring")
    assert tick.expires_at is not None and tick.schedule_id is not None
    time.sleep(0.6)
    assert expire_overdue("default") == [tick.pk]


def test_the_guide_s_example_runs_as_written():
    code = documented_block(GUIDE, "deadline-example", "python")
    found: dict = {}
    try:
        exec(compile(code, "unique-jobs.md", "exec"), found)
        preview = Job.objects.get(pk=found["preview_id"])
        assert preview.expires_at - preview.run_after == timedelta(minutes=10)
        assert Job.objects.get(pk=found["push_id"]).expires_at == found["kickoff"]
    finally:
        registry.unregister("reports.preview")
        registry.unregister("push.send")
