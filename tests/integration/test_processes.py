"""Real ``run_jobs`` processes: shutdown signals, kill -9 and rescue, CLI behaviour."""

from __future__ import annotations

import signal
import time
from io import StringIO

import pytest
from django.core.management import call_command

from django_pqjobs import enqueue_job, enqueue_many
from django_pqjobs.models import Job, JobAttempt
from tests.helpers import run_jobs, wait_for
from tests.testapp.models import Effect

pytestmark = pytest.mark.django_db(transaction=True)


def test_two_processes_drain_2000_jobs_each_exactly_once():
    enqueue_many("tests.effect", [{}] * 2000)
    with run_jobs("-c", "4", "--worker-id", "one"), run_jobs("-c", "4", "--worker-id", "two"):
        wait_for(lambda: Job.objects.filter(status="done").count() == 2000)
    assert Effect.objects.count() == 2000  # unique key: a second run would have failed
    assert not JobAttempt.objects.exists()
    assert set(Job.objects.values_list("locked_by", flat=True)) == {"one", "two"}


def test_sigterm_lets_running_jobs_finish_and_exits_0():
    ids = enqueue_many("tests.sleep", [{"seconds": 1, "report_start": True}] * 3)
    with run_jobs("-c", "4") as worker:
        # Started, not merely claimed: claimed jobs no executor has taken yet are released
        # at once by design, and the claim commits before the executors get them.
        wait_for(lambda: Job.objects.filter(progress__isnull=False).count() == 3)
        worker.signal(signal.SIGTERM)
        assert worker.wait(120) == 0
    assert not Job.objects.filter(status="running").exists()
    assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"done"}


def test_sigterm_releases_unfinished_jobs_after_the_grace_period():
    # handlers that would take an hour: an exit before it released them
    ids = enqueue_many("tests.sleep", [{"seconds": 3600, "report_start": True}] * 2)
    with run_jobs("-c", "2", "--shutdown-timeout", "1s") as worker:
        # both handlers started (claimed is not enough: a job an executor has not taken yet
        # is given back at once, in a release of its own)
        wait_for(lambda: Job.objects.filter(progress__isnull=False).count() == 2)
        worker.signal(signal.SIGTERM)
        assert worker.wait(40) == 0
        assert "released 2 unfinished jobs" in worker.output()
    jobs = Job.objects.filter(pk__in=ids)
    assert {(j.status, j.attempts) for j in jobs} == {("ready", 0)}
    assert list(JobAttempt.objects.values_list("outcome", flat=True)) == ["released"] * 2


def test_second_signal_exits_immediately_saying_which_jobs_it_left_running():
    [job_id] = enqueue_many(
        "tests.sleep", [{"seconds": 3600, "blocking": True, "report_start": True}]
    )
    with run_jobs("-c", "1", "--shutdown-timeout", "1h", "--worker-id", "left") as worker:
        wait_for(lambda: Job.objects.filter(progress__isnull=False).exists())
        worker.signal(signal.SIGTERM)
        time.sleep(0.5)
        worker.signal(signal.SIGINT)
        # forced exit, long before the job's hour and the hour of grace (a wait of 30 s
        # stretched by the load stays under 10 minutes); the job is left to stale-job rescue
        assert worker.wait(30) == 1
        said = worker.output().splitlines()[-1]
    assert said.endswith(
        f"SIGINT received again: exiting now, 1 job left running: {job_id} (tests.sleep); the "
        "stale-job rescue gives it back after 20 minutes without a heartbeat (STALE_TIMEOUT), "
        "or free it now with `manage.py reap_stale --worker-id left`"
    )
    assert Job.objects.get(pk=job_id).status == "running"
    out = StringIO()
    call_command("reap_stale", "--worker-id", "left", stdout=out)  # as the line says
    assert out.getvalue() == "rescued 1 job of worker left\n"
    assert Job.objects.get(pk=job_id).status == "ready"


def test_a_second_signal_with_nothing_running_says_so():
    with run_jobs("-c", "1", "--shutdown-timeout", "1h") as worker:
        wait_for(lambda: "starting" in worker.output())
        worker.process.send_signal(signal.SIGSTOP)  # both signals arrive while it is stopped
        worker.signal(signal.SIGINT)
        worker.signal(signal.SIGTERM)
        worker.process.send_signal(signal.SIGCONT)
        assert worker.wait(30) == 1  # at once, not after the hour of grace
        last = worker.output().splitlines()[-1]
    assert last.endswith(" received again: exiting now (no job was running)")


def test_kill_9_jobs_are_rescued_by_another_worker():
    long_ids = enqueue_many("tests.sleep", [{"seconds": 30}] * 3)
    fast = {"WORKER_STALE_TIMEOUT": "2", "WORKER_REAP_INTERVAL": "0.5"}
    with run_jobs("-c", "4", "--worker-id", "doomed", **fast) as doomed:
        wait_for(lambda: Job.objects.filter(status="running").count() == 3)
        doomed.signal(signal.SIGKILL)
        doomed.wait(10)
    # the second attempt should not take 30 s
    for job_id in long_ids:
        job = Job.objects.get(pk=job_id)
        Job.objects.filter(pk=job_id).update(payload={**job.payload, "seconds": 0.1})
    with run_jobs("-c", "4", "--worker-id", "rescuer", **fast) as rescuer:
        wait_for(
            lambda: Job.objects.filter(pk__in=long_ids, status="done").count() == 3, timeout=30
        )
        assert "rescued job" in rescuer.output()
    for job in Job.objects.filter(pk__in=long_ids):
        assert (job.status, job.attempts, job.locked_by) == ("done", 2, "rescuer")
    lost = JobAttempt.objects.filter(job_id__in=long_ids)
    assert {(a.outcome, a.worker_id) for a in lost} == {("lost", "doomed")}


def test_reap_stale_command_rescues_on_demand():
    ready_again = enqueue_job("tests.sleep", {"seconds": 30})
    used_up = enqueue_job("tests.sleep", {"seconds": 30}, max_attempts=1)
    with run_jobs("-c", "2", "--worker-id", "gone") as worker:
        # their handlers run (a job killed before it started would get its attempt back)
        wait_for(lambda: Job.objects.filter(started_at__isnull=False).count() == 2)
        worker.signal(signal.SIGKILL)
        worker.wait(10)
    time.sleep(1.2)
    out = StringIO()
    call_command("reap_stale", "--older-than", "1s", verbosity=2, stdout=out)
    text = out.getvalue()
    assert f"job {ready_again} tests.sleep attempt 1 (worker gone) -> ready" in text
    assert f"job {used_up} tests.sleep attempt 1 (worker gone) -> failed" in text
    assert "rescued 2 stale jobs" in text
    assert Job.objects.get(pk=ready_again).status == "ready"
    assert Job.objects.get(pk=used_up).status == "failed"


def test_worker_survives_its_connections_being_killed():
    from django.db import connection

    with run_jobs("-c", "2") as worker:
        first = enqueue_job("tests.noop")
        wait_for(lambda: Job.objects.get(pk=first).status == "done")
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        ids = [enqueue_job("tests.noop") for _ in range(5)]
        wait_for(lambda: Job.objects.filter(pk__in=ids, status="done").count() == 5)
        assert worker.process.poll() is None


def test_burst_and_queue_filter():
    emails = enqueue_many("tests.noop", [{}] * 3, queue="emails")
    other = enqueue_job("tests.noop", queue="default")
    with run_jobs("--burst", "--queue", "emails") as worker:
        assert worker.wait(120) == 0
    assert set(Job.objects.filter(pk__in=emails).values_list("status", flat=True)) == {"done"}
    assert Job.objects.get(pk=other).status == "ready"


def test_run_jobs_freezes_its_startup_heap():
    # A full garbage collection over Django's startup objects stalls claiming for ~35 ms.
    job_id = enqueue_job("tests.gc_frozen")
    with run_jobs("--burst") as worker:
        assert worker.wait(120) == 0
    job = Job.objects.get(pk=job_id)
    assert job.status == "done"
    assert job.result > 10_000  # Django, the admin and the apps: tens of thousands


def test_max_jobs_exits_after_that_many():
    enqueue_many("tests.noop", [{}] * 5)
    with run_jobs("-c", "1", "--max-jobs", "3") as worker:
        assert worker.wait(120) == 0
    assert Job.objects.filter(status="done").count() == 3
