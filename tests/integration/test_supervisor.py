"""``run_jobs --processes N``: one command, N worker processes, each restarted if it dies,
all stopped gracefully by one signal."""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from django_pqjobs import enqueue_job, enqueue_many
from django_pqjobs.models import Job, WorkerRecord
from tests.helpers import run_jobs, wait_for, wait_status

pytestmark = pytest.mark.django_db(transaction=True)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_two_processes_drain_a_burst_and_exit_0():
    ids = enqueue_many("tests.sleep", [{"seconds": 0.3}] * 8)
    with run_jobs("--processes", "2", "--burst") as supervisor:
        assert supervisor.wait(60) == 0
        output = supervisor.output()
    jobs = Job.objects.filter(pk__in=ids)
    assert {job.status for job in jobs} == {"done"}
    assert len({job.locked_by for job in jobs}) == 2  # both processes took jobs
    assert output.count("left behind: nothing") == 1  # said once, by the supervisor


def test_one_signal_stops_every_process_gracefully():
    ids = enqueue_many("tests.sleep", [{"seconds": 1.5, "report_start": True}] * 2)
    with run_jobs("--processes", "2") as supervisor:
        wait_for(lambda: WorkerRecord.objects.count() == 2)
        # both handlers started (a job claimed but not yet started is given back at once)
        wait_for(lambda: Job.objects.filter(progress__isnull=False).count() == 2)
        children = list(WorkerRecord.objects.values_list("pid", flat=True))
        assert supervisor.pid not in children
        supervisor.signal(signal.SIGTERM)
        assert supervisor.wait(120) == 0
    # the running jobs were finished, not abandoned
    assert set(Job.objects.filter(pk__in=ids).values_list("status", flat=True)) == {"done"}
    assert not any(alive(pid) for pid in children)


def test_a_process_killed_is_started_again_and_its_job_rescued():
    job_id = enqueue_job("tests.sleep", {"seconds": 30})
    with run_jobs(
        "--processes", "2", WORKER_STALE_TIMEOUT="2", WORKER_REAP_INTERVAL="0.5"
    ) as supervisor:
        running = wait_status(job_id, "running")
        wait_for(lambda: WorkerRecord.objects.count() == 2)
        holder = WorkerRecord.objects.get(pk=running.locked_by)
        first = set(WorkerRecord.objects.values_list("pk", flat=True))
        os.kill(holder.pid, signal.SIGKILL)
        # a new worker process takes its place (its record is a new worker id)
        wait_for(lambda: set(WorkerRecord.objects.values_list("pk", flat=True)) - first)
        assert "restarting it in 1 s" in supervisor.output()
        # the killed process's job is rescued and runs again
        wait_for(
            lambda: (
                Job.objects.filter(pk=job_id, status="running")
                .exclude(locked_by=running.locked_by)
                .exists()
            ),
            timeout=30,
        )
        supervisor.signal(signal.SIGTERM)
        wait_for(lambda: "stopping 2 worker processes" in supervisor.output())
        supervisor.signal(signal.SIGTERM)  # the second: the processes exit at once
        assert supervisor.wait(120) == 1  # and say so


@pytest.mark.slow
def test_the_processes_stop_by_themselves_when_the_supervisor_is_killed():
    ids = enqueue_many("tests.sleep", [{"seconds": 30, "report_start": True}] * 2)
    with run_jobs("--processes", "2", "--shutdown-timeout", "1s") as supervisor:
        wait_for(lambda: Job.objects.filter(progress__isnull=False).count() == 2)
        children = list(WorkerRecord.objects.values_list("pid", flat=True))
        supervisor.signal(signal.SIGKILL)
        supervisor.wait(10)
        # each notices within a second, then gives its job back after its 1 s grace period
        wait_for(lambda: not any(alive(pid) for pid in children))
        assert "the supervisor (pid" in supervisor.output()
    jobs = Job.objects.filter(pk__in=ids)
    assert {(job.status, job.attempts) for job in jobs} == {("ready", 0)}
    assert not WorkerRecord.objects.exists()


def test_jobs_health_checks_the_processes_of_a_worker_id_as_one_group():
    with run_jobs("--processes", "2", "--worker-id", "grp") as supervisor:
        wait_for(
            lambda: (
                WorkerRecord.objects.filter(
                    worker_id__in=["grp-1", "grp-2"], loop_at__isnull=False
                ).count()
                == 2
            ),
            timeout=30,
        )
        out = StringIO()
        call_command("jobs_health", "--worker-id", "grp", stdout=out)
        assert out.getvalue().strip() == "ok: worker group grp alive: 2 processes claiming"
        # one process frozen: its heartbeat (made old here, not waited for) stops
        frozen = WorkerRecord.objects.get(pk="grp-2").pid
        os.kill(frozen, signal.SIGSTOP)
        try:
            WorkerRecord.objects.filter(pk="grp-2").update(
                heartbeat_at=timezone.now() - timedelta(hours=1)
            )
            out = StringIO()
            with pytest.raises(SystemExit) as failed:
                call_command("jobs_health", "--worker-id", "grp", stdout=out)
        finally:
            os.kill(frozen, signal.SIGCONT)
        assert failed.value.code == 1
        assert out.getvalue().startswith("stale: worker grp-2 last heartbeat ")
        assert out.getvalue().strip().endswith("(worker group grp)")
        supervisor.signal(signal.SIGTERM)
        assert supervisor.wait(120) == 0


@pytest.mark.parametrize("value", ["0", "-2", "two", "100000"])
def test_a_bad_processes_flag_is_refused_naming_it(value):
    with pytest.raises(CommandError, match="--processes"):
        call_command("run_jobs", "--processes", value)
