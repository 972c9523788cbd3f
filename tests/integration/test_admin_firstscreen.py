"""A job page's first screen answers its status (only the rows that apply, what the status
asks about first), the list flags a stale worker, and the dashboard is where operators look:
an entry of the admin's index and sidebar, failures at its top."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
from django.db.models.functions import Now
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_pqjobs import enqueue_job, flow
from django_pqjobs.models import Job, JobAttempt, WorkerRecord
from django_pqjobs.testing import drain
from django_pqjobs.transitions.deadlines import expire_overdue
from django_pqjobs.worker.claiming import claim_jobs
from tests.helpers import make_user

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = reverse("admin:django_pqjobs_job_changelist")
INDEX = reverse("admin:index")
DASHBOARD_ENTRY = reverse("admin:django_pqjobs_dashboard_changelist")
# The rows a job shows only when they apply (each was a row of "-" on every job before).
ONLY_WHEN_THEY_APPLY = {"dedupe_key", "key_held", "sequence", "fair", "why_waiting", "links"}


@pytest.fixture
def operator() -> Client:
    return make_user("operator", "view_job", "change_job")


def change_url(job_id: int) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[job_id])


def page_of(client: Client, job_id: int) -> str:
    response = client.get(change_url(job_id))
    assert response.status_code == 200
    return response.content.decode()


def field_rows(page: str) -> list[str]:
    """The job page's rows, by the name of their field, in order."""
    return re.findall(r'<div class="form-row field-(\w+)', page)


def text(page: str) -> str:
    """The page's words as a reader sees them (no markup, styles or scripts)."""
    page = re.sub(r"<(style|script)\b.*?</\1>", " ", page, flags=re.S)
    return html.unescape(" ".join(re.sub(r"<[^>]+>", " ", page).split()))


def failed_job() -> int:
    job_id = enqueue_job("tests.echo", {"order": 42})
    traceback = (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/billing/jobs.py", line 12, in charge\n'
        "    gateway.charge(card)\n"
        "ConnectionError: upstream was down\n"
    )
    Job.objects.filter(pk=job_id).update(
        status="failed",
        attempts=3,
        max_attempts=3,
        last_error=traceback,
        error_type="ConnectionError",
        finished_at=Now(),
    )
    for attempt in (1, 2, 3):
        JobAttempt.objects.create(
            job_id=job_id,
            attempt=attempt,
            outcome="error",
            worker_id="w-1",
            error_type="ConnectionError",
            traceback=traceback,
        )
    return job_id


def test_a_failed_job_shows_its_error_payload_and_attempts_first_and_no_empty_rows(operator):
    page = page_of(operator, failed_job())
    rows = field_rows(page)
    assert rows[:2] == ["status_detail", "last_error_summary"]
    assert not ONLY_WHEN_THEY_APPLY & set(rows), rows
    # the payload, then the attempts, before anything else
    assert rows.index("payload_pretty") < rows.index("attempt_table") < rows.index("timeline")
    assert rows.index("attempt_table") < rows.index("created")
    assert "upstream was down" in text(page) and "traceback below" in text(page)
    assert '"order": 42' in text(page)
    assert "cancel_requested" not in rows and "result_pretty" not in rows  # nothing to show


def test_rows_that_apply_are_shown(operator):
    unique = enqueue_job("tests.echo", dedupe_key="order-7", fair_key="a")
    assert {"dedupe_key", "key_held", "fair"} <= set(field_rows(page_of(operator, unique)))
    sequenced = enqueue_job("tests.echo", sequence="acct-7")
    assert "sequence" in field_rows(page_of(operator, sequenced))


def running_on(worker_id: str, heartbeat_age: float | None) -> int:
    """A job claimed by ``worker_id``, whose record heartbeated ``heartbeat_age`` seconds
    ago (``None``: it has no record)."""
    job_id = enqueue_job("tests.echo")
    if heartbeat_age is not None:
        WorkerRecord.objects.create(
            worker_id=worker_id,
            hostname="web-1",
            pid=1,
            heartbeat_at=timezone.now() - timedelta(seconds=heartbeat_age),
        )
    claim_jobs("default", worker_id, None, 1)
    assert Job.objects.get(pk=job_id).status == "running"
    return job_id


def test_a_job_on_a_stale_worker_says_so_with_its_heartbeats_age_and_release(operator):
    job_id = running_on("doomed", heartbeat_age=600)
    page = page_of(operator, job_id)
    rows = field_rows(page)
    assert rows[:2] == ["status_detail", "worker_state"]
    said = text(page)
    assert re.search(r"worker stale for \d+ s : doomed last heartbeated (59\d|60\d) s ago", said)
    release = reverse("admin:django_pqjobs_job_release", args=[job_id])
    assert f'class="button pqjobs-release" href="{release}"' in page
    assert "runs it now" not in said
    # the list says it too, in the job's row
    listing = text(operator.get(f"{CHANGELIST}?status__exact=running").content.decode())
    assert re.search(r"on doomed — worker stale for \d+ s", listing), listing


def test_a_job_on_a_worker_without_a_record_says_it_is_gone(operator):
    page = page_of(operator, running_on("vanished", heartbeat_age=None))
    assert "vanished is gone" in text(page)


def test_a_job_on_a_live_worker_runs_it_now_without_release_in_its_rows(operator):
    job_id = running_on("alive", heartbeat_age=1)
    page = page_of(operator, job_id)
    said = text(page)
    assert re.search(r"alive runs it now \(heartbeat \d s ago\)", said), said
    assert "stale" not in said and 'class="button pqjobs-release"' not in page
    listing = text(operator.get(f"{CHANGELIST}?status__exact=running").content.decode())
    assert "on alive" in listing and "stale" not in listing


def test_a_viewer_sees_a_stale_worker_but_no_release_button(operator):
    job_id = running_on("doomed", heartbeat_age=600)
    viewer = make_user("viewer", "view_job")
    page = page_of(viewer, job_id)
    assert "worker stale for" in text(page) and 'class="button pqjobs-release"' not in page


def test_a_waiting_workflow_shows_its_steps_first_and_its_park_is_no_failure(operator):
    job_id = enqueue_job("tests.workflow", {"order": "o-1"})
    drain()
    job = Job.objects.get(pk=job_id)
    assert job.status == "waiting" and job.waiting_for == 0
    page = page_of(operator, job_id)
    rows = field_rows(page)
    assert rows.index("why_waiting") < rows.index("workflow_steps") < rows.index("payload_pretty")
    said = text(page)
    assert "sleeping (cool-off) until" in said
    assert "failed attempt" not in said.lower() and "tracebacks" not in said.lower()
    if JobAttempt.objects.filter(job_id=job_id).exists():  # the park is history: said so
        assert "Parked" in said


def test_an_expired_job_says_why_without_a_traceback(operator):
    job_id = enqueue_job("tests.echo", queue="emails", expires_in=60)
    flow.pause_queue("emails", by="alice")
    Job.objects.filter(pk=job_id).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert expire_overdue("default") == [job_id]
    page = page_of(operator, job_id)
    rows = field_rows(page)
    assert rows[:2] == ["status_detail", "expiry"]
    said = text(page)
    assert "not started by its deadline" in said
    assert "its queue emails is paused" in said and "by alice" in said
    assert "traceback" not in said.lower()


def test_after_retry_the_page_tells_one_moment(operator):
    job_id = failed_job()
    operator.post(reverse("admin:django_pqjobs_job_action", args=[job_id, "retry"]))
    ready = page_of(operator, job_id)
    assert field_rows(ready)[:2] == ["status_detail", "previous_error"]
    assert re.search(r"Previous attempt's error: ConnectionError ?: upstream was down", text(ready))
    assert "last_error_summary" not in field_rows(ready)
    claim_jobs("default", "w-2", None, 1)
    running = page_of(operator, job_id)
    rows = field_rows(running)
    assert "previous_error" not in rows and "last_error_summary" not in rows
    assert rows[:2] == ["status_detail", "worker_state"]
    # the old attempts are history, below
    assert rows.index("attempt_table") > rows.index("timeline")


def test_the_dashboard_is_an_entry_of_the_index_and_the_sidebar(operator):
    index = operator.get(INDEX).content.decode()
    assert f'href="{DASHBOARD_ENTRY}"' in index
    listing = operator.get(CHANGELIST).content.decode()
    sidebar = listing.split('id="nav-sidebar"', 1)[1]
    assert f'href="{DASHBOARD_ENTRY}"' in sidebar
    response = operator.get(DASHBOARD_ENTRY)
    assert response.status_code == 200
    assert "Failures, last 24 h" in response.content.decode()
    # none of it for staff who may not view jobs
    stranger = make_user("stranger")
    assert f'href="{DASHBOARD_ENTRY}"' not in stranger.get(INDEX).content.decode()
    assert stranger.get(DASHBOARD_ENTRY).status_code == 403


def test_the_dashboard_leads_with_failures_and_stale_workers(operator):
    failed_job()
    WorkerRecord.objects.create(
        worker_id="stuck-1", hostname="h", pid=1, heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    page = operator.get(DASHBOARD_ENTRY).content.decode()
    failures = page.index('id="failures"')
    assert failures < page.index('id="paused"')
    link = f"{CHANGELIST}?status__exact=failed&amp;job_type=tests.echo"
    assert f'href="{link}">1 failed</a>' in page
    banner = page.index("pqjobs-stale-banner")
    assert banner < failures and "1 stale worker" in text(page)
