"""The operator console in a real browser: log in, filter to failed jobs, retry one from its
page, see it done once a worker ran it.

Needs Debian's ``chromium`` package (/usr/bin/chromium) and the ``playwright`` Python
package (its bundled browsers are never downloaded). Skipped when either is missing, unless
``PQJOBS_REQUIRE_BROWSER=1`` (set by ``.ci/run``), where a missing piece fails the test.
"""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import User

from django_pqjobs import enqueue_job
from django_pqjobs.models import Job, JobAttempt

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

REQUIRED = os.environ.get("PQJOBS_REQUIRE_BROWSER") == "1"

pytestmark = pytest.mark.django_db(transaction=True)


def _unavailable(reason: str) -> None:
    if REQUIRED:
        pytest.fail(f"{reason}, and PQJOBS_REQUIRE_BROWSER=1 requires the browser test to run")
    pytest.skip(reason)


@pytest.fixture
def sync_api():
    if not CHROMIUM.exists():
        _unavailable(f"{CHROMIUM} is missing (Debian package chromium)")
    try:
        return importlib.import_module("playwright.sync_api")
    except ImportError:
        _unavailable("the playwright package is not installed")


def test_operator_retries_a_failed_job_and_sees_it_done(
    sync_api, live_server, worker_factory, tmp_path
):
    # All ORM work happens before the browser starts: Playwright's sync API runs an event
    # loop in this thread, where Django refuses synchronous database access.
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    enqueue_job("tests.noop")
    Job.objects.update(status="done")
    failed = enqueue_job("tests.echo", {"order": 42})
    Job.objects.filter(pk=failed).update(
        status="failed",
        attempts=3,
        max_attempts=3,
        last_error="Traceback (most recent call last):\nConnectionError: upstream was down",
        error_type="ConnectionError",
    )
    JobAttempt.objects.create(
        job_id=failed,
        attempt=3,
        outcome="error",
        worker_id="old-worker",
        error_type="ConnectionError",
        traceback="Traceback (most recent call last):\nConnectionError: upstream was down",
    )
    worker_factory(concurrency=1)  # idle: nothing is ready until the operator retries

    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
        )
        try:
            page = context.new_page()
            page.set_default_timeout(15_000)
            expect = sync_api.expect

            page.goto(f"{live_server.url}/admin/login/?next=/admin/django_pqjobs/job/")
            page.fill("#id_username", "oncall")
            page.fill("#id_password", "pw-oncall")
            page.click("input[type=submit]")
            expect(page.locator("#result_list")).to_be_visible()

            # Filter to failed jobs from the sidebar.
            page.locator("#changelist-filter details[data-filter-title='status']").get_by_role(
                "link", name="Failed"
            ).click()
            expect(page).to_have_url(re.compile(r"status__exact=failed"))
            rows = page.locator("#result_list tbody tr")
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text("upstream was down")

            # Open it, read the traceback, retry it.
            rows.first.get_by_role("link", name=str(failed)).click()
            expect(page.locator(".field-tracebacks")).to_contain_text(
                "ConnectionError: upstream was down"
            )
            page.get_by_role("button", name="Retry").click()
            expect(page.locator("ul.messagelist")).to_contain_text("1 job put back to ready.")

            # The worker picks it up; reloading the page shows it done.
            for _ in range(30):
                status = page.locator(".field-status_badge .readonly").inner_text()
                if status.strip() == "done":
                    break
                page.wait_for_timeout(500)
                page.reload()
            expect(page.locator(".field-status_badge .readonly")).to_have_text("done")
            expect(page.locator(".field-result_pretty")).to_contain_text('"order": 42')
        finally:
            context.close()

    job = Job.objects.get(pk=failed)
    assert job.status == "done" and job.attempts == 1
    assert JobAttempt.objects.filter(job_id=failed).count() == 1  # the history is kept
