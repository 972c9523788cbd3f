"""How to test jobs with django-pqjobs' pytest fixtures: a job, a view that enqueues, a
retry, a schedule, and eager mode. Run from testproject/: ``pytest``."""

import pytest

from django_pqjobs import enqueue_job
from django_pqjobs.models import Job
from shop.models import Order

pytestmark = pytest.mark.django_db


def test_send_receipt_marks_the_order(pqjobs):
    order = Order.objects.create(email="ann@example.com", total="12.00")
    enqueue_job("send_receipt", {"order_id": order.pk})

    (run,) = pqjobs.drain()  # runs the due jobs here, in the test's transaction

    assert run.outcome == "done"
    order.refresh_from_db()
    assert order.receipt_sent_at is not None


def test_placing_an_order_enqueues_its_receipt(client, pqjobs, django_capture_on_commit_callbacks):
    # the view uses enqueue_on_commit: run the on-commit callbacks the test transaction holds
    with django_capture_on_commit_callbacks(execute=True):
        response = client.post("/orders/", {"email": "bob@example.com", "total": "5"})

    order_id = response.json()["order_id"]
    pqjobs.assert_enqueued("send_receipt", {"order_id": order_id}, count=1, queue="emails")
    pqjobs.assert_not_enqueued("flaky_report")


def test_a_flaky_report_retries_then_succeeds(pqjobs):
    job_id = enqueue_job("flaky_report", {"name": "weekly", "fail_times": 2})

    first = pqjobs.drain()  # attempt 1 fails; the retry waits for its backoff
    assert [(r.attempt, r.outcome) for r in first] == [(1, "retry")]

    rest = pqjobs.drain(run_delayed=True)  # run retries (and what they enqueue) now
    assert [(r.job_type, r.attempt, r.outcome) for r in rest] == [
        ("flaky_report", 2, "retry"),
        ("flaky_report", 3, "done"),
        ("summarize", 1, "done"),
    ]
    assert Job.objects.get(pk=job_id).failed_attempts.count() == 2


def test_importing_a_missing_file_fails_for_good(pqjobs):
    enqueue_job("import_contacts", {"path": "/nope.csv"})

    (run,) = pqjobs.drain()

    assert run.outcome == "failed"  # PermanentError: no retries
    assert "does not exist" in run.error


def test_the_nightly_schedule_counts_unsent_receipts(pqjobs):
    Order.objects.create(email="cy@example.com", total="1")
    job_id = pqjobs.trigger_schedule("count_unsent_receipts")  # as the admin's "Run now"

    pqjobs.drain()

    assert Job.objects.get(pk=job_id).result == {"unsent": 1}


def test_in_eager_mode_jobs_run_as_they_are_enqueued(pqjobs_eager):
    order = Order.objects.create(email="di@example.com", total="3")

    enqueue_job("send_receipt", {"order_id": order.pk})

    assert [run.outcome for run in pqjobs_eager] == ["done"]
    order.refresh_from_db()
    assert order.receipt_sent_at is not None
