"""Health checks: the jobs_health command's exit statuses and line, and the view."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from datetime import timedelta
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.test import Client
from django.utils import timezone

from django_pqjobs import enqueue_job, flow
from django_pqjobs.models import Job, WorkerRecord
from django_pqjobs.worker.housekeeping import expire_overdue
from tests.helpers import ROOT, run_jobs, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


def health(*args: str) -> tuple[int, str]:
    """Run ``jobs_health`` in-process: (exit status, its line)."""
    out = StringIO()
    try:
        call_command("jobs_health", *args, stdout=out)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue().strip()


def worker_record(worker_id: str, *, heartbeat: float = 0, loop: float | None = 0, **fields):
    now = timezone.now()
    return WorkerRecord.objects.create(
        worker_id=worker_id,
        hostname=fields.pop("hostname", socket.gethostname()),
        heartbeat_at=now - timedelta(seconds=heartbeat),
        loop_at=None if loop is None else now - timedelta(seconds=loop),
        **fields,
    )


@pytest.mark.slow
def test_a_real_worker_is_alive_then_stale_when_it_stops_heartbeating():
    with run_jobs("--worker-id", "probe-1", WORKER_STALE_TIMEOUT="1.5") as worker:
        wait_for(lambda: WorkerRecord.objects.filter(worker_id="probe-1", loop_at__isnull=False))
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PQJOBS_TEST_DATABASE": connection.settings_dict["NAME"],
        }
        command = [sys.executable, "-m", "django", "jobs_health", "--max-heartbeat-age", "2s"]
        probe = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        assert probe.returncode == 0, probe.stdout + probe.stderr
        assert probe.stdout.startswith("ok: worker probe-1 alive (heartbeat ")

        worker.signal(signal.SIGSTOP)  # frozen: its heartbeat stops
        try:
            wait_for(lambda: health("--worker-id", "probe-1", "--max-heartbeat-age", "2s")[0])
            code, line = health("--worker-id", "probe-1", "--max-heartbeat-age", "2s")
        finally:
            worker.signal(signal.SIGCONT)
    assert code == 1
    assert line.startswith("stale: worker probe-1 last heartbeat ")


def test_exit_statuses_alive_stale_stuck_missing():
    assert health() == (1, f"no worker: found no record of a worker on host {socket.gethostname()}")
    worker_record("old", heartbeat=600, started_at=timezone.now() - timedelta(hours=1))
    worker_record("new", heartbeat=1, loop=2)
    code, line = health()
    assert code == 0 and line.startswith("ok: worker new alive")  # the newest on this host
    assert health("--worker-id", "old")[0] == 1
    # 600 s when it was written; a second or more later when the command reads it
    assert re.match(r"stale: worker old last heartbeat 6\d\d s", health("--worker-id", "old")[1])

    worker_record("stuck", heartbeat=1, loop=300)
    code, line = health("--worker-id", "stuck")
    assert (
        code == 1 and line == "stuck: worker stuck heartbeats but its claim loop last ran 300 s ago"
    )
    assert health("--worker-id", "stuck", "--max-loop-age", "10m")[0] == 0
    assert health("--worker-id", "nobody")[0] == 1
    assert (
        health("--host", "elsewhere")[1]
        == "no worker: found no record of a worker on host elsewhere"
    )


def test_any_host_counts_workers_alive_and_claiming():
    worker_record("a", hostname="h1")
    worker_record("b", hostname="h2", loop=None)  # just started: no loop report yet
    worker_record("c", hostname="h3", heartbeat=600)
    assert health("--any-host") == (0, "ok: 2 workers alive and claiming")
    code, line = health("--any-host", "3")
    assert code == 1 and line.startswith("no worker: 2 of the required 3 alive and claiming")


def test_lagging_queue_exits_3():
    job_id = enqueue_job("tests.noop", queue="slow")
    Job.objects.filter(pk=job_id).update(run_after=F("run_after") - timedelta(minutes=10))
    enqueue_job("tests.noop", queue="other", delay=3600)
    code, line = health("--skip-worker", "--max-lag", "5m")
    assert code == 3 and line.startswith("lagging: the oldest due job has waited 60")
    assert health("--skip-worker", "--max-lag", "1h")[0] == 0
    assert health("--skip-worker", "--max-lag", "5m", "--queue", "other")[0] == 0
    worker_record("w")
    code, line = health("--max-lag", "5m", "--queue", "slow")
    assert code == 3 and "in slow" in line  # the worker is fine, the lag is not
    code, line = health("--max-lag", "1h")
    assert code == 0 and line.startswith("ok: worker w alive") and "lag" in line


def test_an_unreachable_database_exits_4():
    port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"  # nothing listens there
    try:
        code, line = health()
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert code == 4 and line.startswith("unreachable: could not read the job tables")


def test_jobs_held_by_a_pause_are_named_but_do_not_fail_the_lag_check():
    for queue in ("slow", "throttled"):
        job_id = enqueue_job("tests.noop", queue=queue)
        Job.objects.filter(pk=job_id).update(run_after=F("run_after") - timedelta(minutes=10))
    flow.pause_queue("slow")  # which holds its ready job at once
    assert Job.objects.get(queue="slow").blocked_by == "paused"
    code, line = health("--skip-worker", "--max-lag", "5m", "--queue", "slow")
    assert code == 0 and line == "ok: lag 0.0 s in slow (max 300 s); 1 job held by a pause"
    # a job held by a rate limit waits for room: it lags
    Job.objects.filter(queue="throttled").update(status="blocked", blocked_by="rate")
    code, line = health("--skip-worker", "--max-lag", "5m")
    assert code == 3
    assert line.startswith("lagging: the oldest due job has waited 60")
    assert line.endswith("; 1 job held by a pause")


def test_jobs_that_expired_lately_are_named_but_do_not_fail_the_lag_check():
    job_id = enqueue_job("tests.noop", queue="slow", expires_in=60)
    Job.objects.filter(pk=job_id).update(expires_at=F("run_after"))
    assert expire_overdue(connection.alias) == [job_id]
    code, line = health("--skip-worker", "--max-lag", "5m", "--queue", "slow")
    assert code == 0 and line == "ok: lag 0.0 s in slow (max 300 s); 1 job expired in the last hour"
    code, line = health("--skip-worker", "--max-lag", "5m", "--queue", "other")
    assert code == 0 and "expired" not in line


def staff_client() -> Client:
    user = get_user_model().objects.create_user("ops", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


def test_health_view_tells_staff_why():
    client = staff_client()
    response = client.get("/health/jobs")
    assert response.status_code == 503
    assert response.content.decode().startswith("no worker: 0 of the required 1")
    worker_record("w")
    response = client.get("/health/jobs")
    assert (response.status_code, response.content) == (200, b"ok: 1 worker alive and claiming\n")
    assert client.get("/health/jobs/lag").status_code == 200
    job_id = enqueue_job("tests.noop", queue="slow")
    Job.objects.filter(pk=job_id).update(run_after=F("run_after") - timedelta(minutes=2))
    response = client.get("/health/jobs/lag")
    assert response.status_code == 503 and response.content.startswith(b"lagging:")


SECRETS = ("worker-7f3a", "db-host-9", "slow", "tests.noop")


def anonymous_body(client: Client, path: str, status: int, **headers: str) -> str:
    response = client.get(path, **headers)
    assert response.status_code == status
    body = response.content.decode()
    assert not any(secret in body for secret in SECRETS), body
    return body


def test_anyone_may_probe_the_health_view_and_gets_the_state_alone(settings):
    settings.PQJOBS = {**settings.PQJOBS, "METRICS_TOKEN": "x" * 40}
    anonymous = Client()
    assert anonymous_body(anonymous, "/health/jobs", 503) == "no worker\n"
    worker_record("worker-7f3a", hostname="db-host-9")
    assert anonymous_body(anonymous, "/health/jobs", 200) == "ok\n"
    job_id = enqueue_job("tests.noop", queue="slow")
    Job.objects.filter(pk=job_id).update(run_after=F("run_after") - timedelta(minutes=2))
    assert anonymous_body(anonymous, "/health/jobs/lag", 503) == "lagging\n"
    # a logged-in user who is not staff, and a wrong token, are anonymous here too
    member = Client()
    member.force_login(get_user_model().objects.create_user("member", password="pw"))
    assert anonymous_body(member, "/health/jobs/lag", 503) == "lagging\n"
    wrong = {"HTTP_AUTHORIZATION": "Bearer " + "y" * 40}
    assert anonymous_body(anonymous, "/health/jobs/lag", 503, **wrong) == "lagging\n"
    assert anonymous_body(anonymous, "/health/jobs", 200, HTTP_AUTHORIZATION="Bearer") == "ok\n"

    # the token and staff get the line, with the worker's id
    token = {"HTTP_AUTHORIZATION": "Bearer " + "x" * 40}
    response = anonymous.get("/health/jobs", **token)
    assert response.content == b"ok: 1 worker alive and claiming\n"
    assert "Authorization" in response["Vary"]
    WorkerRecord.objects.update(heartbeat_at=timezone.now() - timedelta(hours=1))
    response = anonymous.get("/health/jobs", **token)
    assert response.status_code == 503 and b"worker-7f3a" in response.content
    assert b"worker-7f3a" in staff_client().get("/health/jobs").content
    assert anonymous_body(anonymous, "/health/jobs", 503) == "no worker\n"


def test_an_unreachable_database_is_a_state_for_anyone_and_an_error_for_the_token(settings):
    settings.PQJOBS = {**settings.PQJOBS, "METRICS_TOKEN": "x" * 40}
    client = Client()
    port = connection.settings_dict["PORT"]
    name = connection.settings_dict["NAME"]
    connection.close()
    connection.settings_dict["PORT"] = "1"  # nothing listens there
    try:
        public = client.get("/health/jobs")
        private = client.get("/health/jobs", HTTP_AUTHORIZATION="Bearer " + "x" * 40)
    finally:
        connection.close()
        connection.settings_dict["PORT"] = port
    assert (public.status_code, public.content) == (503, b"unreachable\n")
    assert private.status_code == 503
    assert private.content.startswith(b"unreachable: could not read the job tables")
    assert b"port 1" in private.content
    for secret in (name, "127.0.0.1", "port 1"):
        assert secret.encode() not in public.content
