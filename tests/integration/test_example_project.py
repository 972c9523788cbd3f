"""The example project's views, the embedded worker and the prune_jobs command."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from shop.models import Order

from django_pqjobs import enqueue_job, start_embedded_worker
from django_pqjobs.models import Job
from django_pqjobs.worker import queries
from tests.conftest import wait_status

pytestmark = pytest.mark.django_db(transaction=True)


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
    assert wait_status(report, "done", timeout=15).attempts == 2
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
        worker.thread.join(10)
        assert not worker.thread.is_alive()


def test_run_jobs_does_nothing_when_disabled(monkeypatch):
    monkeypatch.setenv("WORKER_ENABLED", "0")
    out = StringIO()
    call_command("run_jobs", stdout=out)
    assert "worker disabled" in out.getvalue()


def test_prune_jobs_command():
    old, recent = enqueue_job("t"), enqueue_job("t")
    now = queries.database_now("default")
    Job.objects.filter(pk=old).update(status="done", finished_at=now - timedelta(days=3))
    Job.objects.filter(pk=recent).update(status="done", finished_at=now)
    out = StringIO()
    call_command("prune_jobs", "--done", "2d", stdout=out)
    assert "done: deleted 1" in out.getvalue()
    assert list(Job.objects.values_list("pk", flat=True)) == [recent]
    with pytest.raises(CommandError, match="not a duration"):
        call_command("prune_jobs", "--done", "soon")
