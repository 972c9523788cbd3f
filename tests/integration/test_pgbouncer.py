"""The core scenarios through a real PgBouncer in transaction mode.

PgBouncer (Debian's ``pgbouncer``) is started by the tests on a port of their own and
stopped at the end. Everything goes through it — enqueue, the admin's actions, commands,
and the run_jobs workers' claims, completions, rescue and schedules — except LISTEN, which
cannot work through a transaction pooler: workers LISTEN on a direct connection
(``PQJOBS['LISTEN_DATABASE']``), as the docs say to configure it.

Skipped where PgBouncer is not installed, unless PQJOBS_REQUIRE_PGBOUNCER=1 (CI sets it).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.db.models import F
from django.test import Client
from django.urls import reverse

from django_pqjobs import enqueue_job, enqueue_many
from django_pqjobs.models import Job, JobAttempt, Schedule
from tests.helpers import bound, run_jobs, wait_for, wait_status

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


DIRECT: list = []  # host and port of the server itself, for the workers' LISTEN


def _binary() -> str | None:
    return shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.path.exists(p)), None
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def pgbouncer() -> Iterator[int]:
    """A PgBouncer in transaction mode in front of the test server; yields its port."""
    binary = _binary()
    if binary is None:
        if os.environ.get("PQJOBS_REQUIRE_PGBOUNCER") == "1":
            pytest.fail("PQJOBS_REQUIRE_PGBOUNCER=1 but pgbouncer is not installed")
        pytest.skip("pgbouncer is not installed (apt-get install pgbouncer)")
    settings = connection.settings_dict
    DIRECT[:] = [settings["HOST"] or "127.0.0.1", settings["PORT"] or 5432]
    # not under pytest's temporary directory: as root, PgBouncer runs as postgres, which
    # must reach its config and log
    directory = Path(tempfile.mkdtemp(prefix="pqjobs-pgbouncer-"))
    port = _free_port()
    config = directory / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={settings['HOST'] or '127.0.0.1'} port={settings['PORT'] or 5432} "
        f"user={settings['USER'] or 'postgres'}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = transaction\nadmin_users = postgres\n"
        "default_pool_size = 20\nmax_client_conn = 500\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        f"logfile = {directory / 'pgbouncer.log'}\npidfile = {directory / 'pgbouncer.pid'}\n"
    )
    command = [binary, str(config)]
    if os.geteuid() == 0:  # pgbouncer refuses to run as root
        shutil.chown(directory, "postgres")
        os.chmod(config, 0o644)
        command[1:1] = ["-u", "postgres"]
    output = directory / "pgbouncer.out"
    with open(output, "w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                psycopg.connect(
                    host="127.0.0.1", port=port, user="postgres", dbname=settings["NAME"]
                ).close()
                break
            except psycopg.OperationalError:
                if process.poll() is not None or time.monotonic() > deadline:
                    logs = [directory / "pgbouncer.log", output]
                    raise RuntimeError(
                        "pgbouncer did not start: "
                        + "\n".join(log.read_text() for log in logs if log.exists())
                    ) from None
                time.sleep(0.1)
        yield port
    finally:
        process.terminate()
        try:
            process.wait(bound(10))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(bound(5))
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def bounced(pgbouncer: int) -> Iterator[int]:
    """This test's own database work goes through PgBouncer too (its Django connection is
    pointed at PgBouncer's port); yields the port."""
    settings = connection.settings_dict
    saved = {key: settings.get(key) for key in ("HOST", "PORT", "DISABLE_SERVER_SIDE_CURSORS")}
    connection.close()
    settings.update(HOST="127.0.0.1", PORT=str(pgbouncer), DISABLE_SERVER_SIDE_CURSORS=True)
    try:
        before = transactions(pgbouncer)
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        assert transactions(pgbouncer) > before  # it went through PgBouncer
        yield pgbouncer
    finally:
        connection.close()
        settings.update(saved)


def transactions(port: int) -> int:
    """Transactions PgBouncer has pooled for the test database (its admin console)."""
    name = connection.settings_dict["NAME"]
    with psycopg.connect(
        host="127.0.0.1", port=port, user="postgres", dbname="pgbouncer", autocommit=True
    ) as admin:
        cursor = admin.execute("SHOW STATS")
        columns = [c.name for c in cursor.description or []]
        for row in cursor.fetchall():
            stats = dict(zip(columns, row, strict=True))
            if stats["database"] == name:
                return int(stats["total_xact_count"])
    return 0


def worker_env(port: int) -> dict[str, str]:
    """run_jobs through PgBouncer, LISTEN on a direct connection."""
    user = connection.settings_dict["USER"] or "postgres"
    host, direct_port = DIRECT
    return {
        "DATABASE_URL": f"postgres://{user}@127.0.0.1:{port}/x",
        "PQJOBS_TEST_LISTEN_URL": f"postgres://{user}@{host}:{direct_port}/x",
    }


def listeners() -> int:
    """Workers whose listener LISTENs now (they say so in their row)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pqjobs_worker WHERE listening")
        return int(cursor.fetchone()[0])


def test_enqueue_claim_complete_retry_and_fail_through_pgbouncer(bounced):
    before = transactions(bounced)
    with run_jobs("--concurrency", "4", "--worker-id", "bounced", **worker_env(bounced)) as worker:
        wait_for(listeners)  # its LISTEN connection bypasses PgBouncer
        ok = enqueue_job("tests.echo", {"n": 1}, dedupe_key="once")
        assert enqueue_job("tests.echo", {"n": 2}, dedupe_key="once") == ok
        many = enqueue_many("tests.noop", [{}] * 50)
        retried = enqueue_job("tests.retry_then_ok", {"succeed_on": 2})
        failed = enqueue_job("tests.permanent")
        atomic = enqueue_job("tests.atomic_counter", {"name": "bounced"})
        chained = enqueue_job("tests.chain")
        assert wait_status(ok, "done").result["echo"] == {"n": 1}
        for job_id in many:
            wait_status(job_id, "done")
        assert wait_status(retried, "done").attempts == 2
        assert wait_status(failed, "failed").error_type == "PermanentError"
        assert JobAttempt.objects.filter(job_id=failed).count() == 1
        wait_status(atomic, "done")
        child = wait_for(lambda: Job.objects.filter(parent_id=chained).first())
        wait_status(child.pk, "done")
        assert "LISTEN connection lost" not in worker.output()
        # claims and completions of 56 jobs went through PgBouncer
        assert transactions(bounced) - before > 56
        assert set(Job.objects.filter(pk__in=many).values_list("locked_by", flat=True)) == {
            "bounced"
        }


def test_rescue_and_schedules_through_pgbouncer(bounced):
    orphan = enqueue_job("tests.echo", {"orphan": True})
    Job.objects.filter(pk=orphan).update(
        status="running",
        attempts=1,
        locked_by="ghost",
        locked_at=F("created_at"),
        heartbeat_at=F("created_at") - timedelta(minutes=5),
    )
    Schedule.objects.create(
        name="every-second", job_type="tests.echo", payload={"tick": True}, interval_seconds=1
    )
    env = {**worker_env(bounced), "WORKER_STALE_TIMEOUT": "2", "WORKER_REAP_INTERVAL": "0.5"}
    with run_jobs("--concurrency", "2", **env):
        assert wait_status(orphan, "done").attempts == 2
        assert JobAttempt.objects.get(job_id=orphan).outcome == "lost"
        ticks = wait_for(
            lambda: Job.objects.filter(payload={"tick": True}, status="done").count() >= 2,
            timeout=20,
        )
        assert ticks
        assert Schedule.objects.get(name="every-second").last_job_id is not None


def test_admin_actions_and_commands_through_pgbouncer(bounced):
    failed = enqueue_job("tests.noop")
    Job.objects.filter(pk=failed).update(status="failed", last_error="boom", error_type="E")
    ready = enqueue_job("tests.noop")
    delayed = enqueue_job("tests.noop", delay=3600)
    User.objects.create_superuser("root", password="pw")
    admin = Client()
    admin.force_login(User.objects.get(username="root"))
    changelist = reverse("admin:django_pqjobs_job_changelist")
    for action, job_id in [("retry_action", failed), ("cancel_action", ready)]:
        response = admin.post(changelist, {"action": action, "_selected_action": [job_id]})
        assert response.status_code == 302
    response = admin.post(changelist, {"action": "run_now_action", "_selected_action": [delayed]})
    assert response.status_code == 302
    assert Job.objects.get(pk=failed).status == "ready"
    assert Job.objects.get(pk=ready).status == "cancelled"
    assert Job.objects.get(pk=delayed).run_after <= Job.objects.get(pk=delayed).updated_at
    for page in (changelist, reverse("admin:django_pqjobs_job_dashboard")):
        assert admin.get(page).status_code == 200
    assert admin.get("/metrics").status_code == 200

    out = StringIO()
    call_command("reap_stale", stdout=out)
    call_command("failed_jobs", "--status", "cancelled", "--retry", "--no-input", stdout=out)
    assert "1 job put back to ready" in out.getvalue()
    Job.objects.filter(pk=ready).update(status="cancelled", finished_at=F("created_at"))
    call_command("prune_jobs", "--cancelled", "0s", stdout=out)
    assert "cancelled: deleted 1" in out.getvalue() and not Job.objects.filter(pk=ready).exists()
