"""The example project's views, its demo command, the embedded worker and prune_jobs."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from datetime import timedelta
from io import StringIO
from pathlib import Path
from urllib.parse import quote

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from shop.models import Order

from django_pqjobs import enqueue_job, start_embedded_worker
from django_pqjobs.clock import database_now
from django_pqjobs.models import Job
from tests.helpers import bound, wait_status

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def test_place_order_enqueues_the_receipt_on_commit(client):
    response = client.post("/shop/orders/", {"email": "a@example.com", "total": "9.50"})
    assert response.status_code == 201
    order_id = response.json()["order_id"]
    job = Job.objects.get(job_type="send_receipt")
    assert job.payload == {"order_id": order_id} and job.queue == "emails"


def test_place_order_rejects_bad_input_without_enqueueing(client):
    assert client.post("/shop/orders/", {"email": "nope", "total": "1"}).status_code == 400
    assert client.post("/shop/orders/", {"email": "a@b.c", "total": "x"}).status_code == 400
    assert not Job.objects.exists() and not Order.objects.exists()


def test_request_report_dedupes_on_the_report_name(client):
    first = client.post("/shop/reports/", {"name": "weekly"}).json()["job_id"]
    second = client.post("/shop/reports/", {"name": "weekly"}).json()["job_id"]
    other = client.post("/shop/reports/", {"name": "monthly"}).json()["job_id"]
    assert first == second != other


def test_example_jobs_run_end_to_end(worker_factory):
    order = Order.objects.create(email="a@example.com", total=5)
    receipt = enqueue_job("send_receipt", {"order_id": order.pk})
    report = enqueue_job("flaky_report", {"name": "w", "fail_times": 1})
    contacts = enqueue_job("import_contacts", {"path": "/missing.csv"})
    worker_factory(concurrency=2)
    assert wait_status(receipt, "done").result == {"order_id": order.pk, "to": "a@example.com"}
    assert wait_status(report, "done").attempts == 2
    assert wait_status(contacts, "failed").attempts == 1
    order.refresh_from_db()
    assert order.receipt_sent_at is not None
    child = Job.objects.get(parent_id=report)
    assert wait_status(child.pk, "done").result == {"summary_of": "w"}


def test_embedded_worker_runs_jobs_and_can_be_disabled(monkeypatch):
    monkeypatch.setenv("WORKER_ENABLED", "false")
    assert start_embedded_worker() is None
    monkeypatch.setenv("WORKER_ENABLED", "true")
    worker = start_embedded_worker(concurrency=1, shutdown_timeout=1)
    assert worker is not None
    try:
        job_id = enqueue_job("tests.echo", {"embedded": True})
        assert wait_status(job_id, "done").result["echo"] == {"embedded": True}
    finally:
        worker.stop()
        assert worker.thread is not None
        worker.thread.join(bound(10))
        assert not worker.thread.is_alive()


def test_prune_jobs_command():
    old, recent = enqueue_job("t"), enqueue_job("t")
    now = database_now("default")
    Job.objects.filter(pk=old).update(status="done", finished_at=now - timedelta(days=3))
    Job.objects.filter(pk=recent).update(status="done", finished_at=now)
    out = StringIO()
    call_command("prune_jobs", "--done", "2d", stdout=out)
    assert "done: deleted 1" in out.getvalue()
    assert list(Job.objects.values_list("pk", flat=True)) == [recent]
    with pytest.raises(CommandError, match="not a duration"):
        call_command("prune_jobs", "--done", "soon")


@pytest.mark.slow
def test_demo_command_counts_jobs_and_attempts_and_shows_the_recurring_job():
    """`manage.py demo` as scripts/demo.sh runs it: the example project's settings (which
    declare the recurring job), against this test's database."""
    db = connection.settings_dict
    credentials = quote(db["USER"] or "postgres") + (
        f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else ""
    )
    url = f"postgres://{credentials}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"
    environment = {**os.environ, "DATABASE_URL": url}
    environment.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "testproject/manage.py", "demo", "--timeout", "60"],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=bound(100),
        check=False,
    )
    output = done.stdout
    assert done.returncode == 0, done.stderr
    assert "gave up waiting" not in output
    # send_receipt, flaky_report (3 attempts), summarize, import_contacts: 4 jobs, 6 attempts
    assert "4 jobs (3 done, 1 failed) in 6 attempts" in output
    # once a minute (its runs no longer bury the demo's jobs in the list), run once now
    assert "schedule 'order-stats', every 60 s" in output
    assert "(manage.py trigger_schedule order-stats)" in output
    runs = re.findall(r"job (\d+) enqueued at [\d:]+: (\w+) (.*)", output)
    assert [status for _, status, _ in runs] == ["done"]
    assert ast.literal_eval(runs[0][2]) == {"orders": 1, "receipts_sent": 1}
    assert Job.objects.filter(job_type="order_stats", schedule__name="order-stats").count() == 1
