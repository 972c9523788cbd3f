"""The operator console in a real browser: log in, filter to failed jobs, retry one from its
page, see it done once a worker ran it; the job list at laptop width and on a phone; the
dashboard in dark mode and on a phone, and its worker table; a failed job's first screen; a
batch's page, its failed member and back.

``PQJOBS_SCREENSHOTS=<directory>`` keeps screenshots of the batch pages there.

Needs Debian's ``chromium`` package (/usr/bin/chromium) and the ``playwright`` Python
package (its bundled browsers are never downloaded). Skipped when either is missing, unless
``PQJOBS_REQUIRE_BROWSER=1`` (set by ``.ci/run``), where a missing piece fails the test.
"""

from __future__ import annotations

import importlib
import os
import re
from datetime import timedelta
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db.models.functions import Now
from django.utils import timezone

from django_pqjobs import batch, enqueue_job
from django_pqjobs.models import Job, JobAttempt, WorkerRecord
from django_pqjobs.testing import drain
from tests.helpers import bound

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
            page.set_default_timeout(bound(15) * 1000)
            expect = sync_api.expect
            expect.set_options(timeout=bound(5) * 1000)

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
            expect(page.locator("ul.messagelist")).to_contain_text(
                f"Job {failed} retried: it was put back to ready."
            )

            # The worker picks it up; reloading the page shows it done.
            for _ in range(30):
                status = page.locator(".field-status_detail .readonly").inner_text()
                if status.strip().startswith("done"):
                    break
                page.wait_for_timeout(500)
                page.reload()
            expect(page.locator(".field-status_detail .readonly")).to_contain_text("done since")
            expect(page.locator(".field-result_pretty")).to_contain_text('"order": 42')
            # The timeline tells the story: attempt 3 failed, the retry, attempt 4 done.
            timeline = page.locator(".pqjobs-timeline")
            expect(timeline).to_contain_text("retried by oncall")
            expect(timeline).to_contain_text("attempt 4 started")
        finally:
            context.close()

    job = Job.objects.get(pk=failed)
    # attempt numbers went on from the failed attempt 3 (never reused)
    assert job.status == "done" and job.attempts == 4
    assert JobAttempt.objects.filter(job_id=failed).count() == 1  # the history is kept


def failed_jobs(count: int) -> list[int]:
    """Failed jobs with long type names and long errors: the widest the list gets."""
    ids = []
    for n in range(count):
        job_id = enqueue_job("tests.effect_quick_retry", {"n": n}, queue="billing-and-invoices")
        Job.objects.filter(pk=job_id).update(
            status="failed",
            attempts=5,
            max_attempts=5,
            priority=50,
            last_error="Traceback (most recent call last):\nConnectionError: the payment "
            f"gateway reset the connection while charging invoice {n} (upstream said 502)",
            error_type="ConnectionError",
        )
        ids.append(job_id)
    return ids


def logged_in_page(sync_api, playwright, tmp_path, live_server, **options):
    """A page of a fresh browser, logged in as a superuser (created before the browser
    starts: Django refuses database access in the event loop Playwright runs)."""
    context = playwright.chromium.launch_persistent_context(
        str(tmp_path / "profile"),
        executable_path=str(CHROMIUM),
        headless=True,
        args=CHROMIUM_ARGS,
        **options,
    )
    page = context.new_page()
    page.set_default_timeout(bound(15) * 1000)  # and every expectation, stretched by the load
    sync_api.expect.set_options(timeout=bound(5) * 1000)
    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    page.fill("#id_username", "oncall")
    page.fill("#id_password", "pw-oncall")
    page.click("input[type=submit]")
    sync_api.expect(page.locator("#content")).to_be_visible()
    return context, page


# Where an element is, and whether the list's table fits its box without sideways scrolling.
_BOX = "e => { const r = e.getBoundingClientRect(); return [r.left, r.right, r.width]; }"
_FITS = "e => e.scrollWidth <= e.clientWidth + 1"
_TOP_BOTTOM = "e => { const r = e.getBoundingClientRect(); return [r.top, r.bottom]; }"
_SHAPE = (
    "e => { const s = getComputedStyle(e); return [s.borderRadius, s.fontSize, s.textTransform]; }"
)
# Whether every word of an element's text lies on one line (none is broken across two).
_WORDS_UNBROKEN = """e => {
  const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    for (const word of node.data.matchAll(/\\S+/g)) {
      const range = document.createRange();
      range.setStart(node, word.index);
      range.setEnd(node, word.index + word[0].length);
      const tops = new Set([...range.getClientRects()].map(r => Math.round(r.top)));
      if (tops.size > 1) return false;
    }
  }
  return true;
}"""


def test_the_error_column_is_visible_on_the_failed_filter_at_1280x800(
    sync_api, live_server, tmp_path
):
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    failed_jobs(3)
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api, playwright, tmp_path, live_server, viewport={"width": 1280, "height": 800}
        )
        try:
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/?status__exact=failed")
            # The admin's navigation side bar is open (its default) and so is the filter bar.
            sync_api.expect(page.locator("#nav-sidebar")).to_be_visible()
            sync_api.expect(page.locator("#changelist-filter")).to_be_visible()
            header = page.locator("#result_list thead th.column-error")
            cell = page.locator("#result_list tbody tr").first.locator("td.field-error")
            sync_api.expect(header).to_be_visible()
            sync_api.expect(cell).to_contain_text("ConnectionError: the payment gateway")
            results = page.locator("#changelist-form .results")
            assert results.evaluate(_FITS), "the job list scrolls sideways"
            left, right, width = cell.evaluate(_BOX)
            box_left, box_right, _ = results.evaluate(_BOX)
            assert box_left <= left and right <= box_right <= 1280, (left, right, box_right)
            assert width >= 120  # room to read, not a sliver
        finally:
            context.close()


def test_the_job_list_works_on_a_phone(sync_api, live_server, tmp_path):
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    *_, newest = failed_jobs(3)  # the list shows it first
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api,
            playwright,
            tmp_path,
            live_server,
            viewport={"width": 390, "height": 844},
            is_mobile=True,
            has_touch=True,
        )
        try:
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/?status__exact=failed")
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
            row = page.locator("#result_list tbody tr").first
            for field in ("field-id", "field-job_type_cell", "field-status_cell", "field-error"):
                _, right, _ = row.locator(f".{field}").evaluate(_BOX)
                assert right <= 390, field
            sync_api.expect(row.locator(".field-error")).to_contain_text("upstream said 502")
            row.get_by_role("link", name=str(newest)).click()
            sync_api.expect(page.locator(".field-status_detail")).to_contain_text("failed")
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
        finally:
            context.close()


def test_the_dashboard_in_dark_mode_and_on_a_phone(sync_api, live_server, tmp_path):
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    failed_jobs(2)
    Job.objects.update(finished_at=Now())
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api,
            playwright,
            tmp_path,
            live_server,
            viewport={"width": 390, "height": 844},
            color_scheme="dark",
        )
        try:
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/dashboard/")
            chart = page.locator("svg.pqjobs-chart")
            sync_api.expect(chart).to_contain_text("peak 2 / min")
            # The chart takes the dark theme's background, not a light panel.
            background = chart.locator("rect").first.evaluate("e => getComputedStyle(e).fill")
            assert background == "rgb(33, 33, 33)", background
            left, right, _ = chart.evaluate(_BOX)
            assert left >= 0 and right <= 390, (left, right)
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
        finally:
            context.close()


def test_the_dashboards_worker_table_shows_text_not_markup(sync_api, live_server, tmp_path):
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    WorkerRecord.objects.create(
        worker_id="web-1-4242-a1b2c3",
        hostname="web-1",
        pid=4242,
        queues=["default", "emails"],
        concurrency=4,
        heartbeat_at=timezone.now() - timedelta(seconds=8),
    )
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api, playwright, tmp_path, live_server, viewport={"width": 1280, "height": 800}
        )
        try:
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/dashboard/")
            row = page.locator("#pqjobs-workers tbody tr", has_text="web-1-4242-a1b2c3")
            sync_api.expect(row).to_have_count(1)
            text = row.inner_text()
            assert '">' not in text and "<time" not in text, text
            heartbeat = row.locator("td.pqjobs-heartbeat")
            # the time with its zone, then its age (the console's one format)
            said = heartbeat.inner_text().strip()
            assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(\d+ s ago\)", said), text
        finally:
            context.close()


def test_a_failed_jobs_first_screen_shows_its_error(sync_api, live_server, tmp_path):
    """At 1280x800 the job list names the exception by its class, unbroken, and the job
    page shows the last error — type, message, where it was raised — without scrolling,
    under action buttons styled alike (the disabled ones readable)."""
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    job_id = enqueue_job("tests.permanent", {"card": "4242"})
    drain()
    message = Job.objects.get(pk=job_id).last_error.rstrip().splitlines()[-1]
    shots = os.environ.get("PQJOBS_SCREENSHOTS")
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api, playwright, tmp_path, live_server, viewport={"width": 1280, "height": 800}
        )
        try:
            expect = sync_api.expect
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/?status__exact=failed")
            cell = page.locator("#result_list tbody tr").first.locator("td.field-error")
            expect(cell).to_have_text(re.compile(r"^PermanentError: "))
            assert "django_pqjobs.errors" not in cell.inner_text()
            assert cell.evaluate(_WORDS_UNBROKEN), "a word of the error breaks across lines"
            if shots:
                page.screenshot(path=f"{shots}/failed-list.png")

            cell.locator("xpath=..").get_by_role("link", name=str(job_id)).click()
            expect(page.locator(".field-status_detail")).to_contain_text("failed")
            # The error's message first appears within the first 800 px: no scrolling.
            said = page.get_by_text(message.partition(": ")[2]).first
            top, bottom = said.evaluate(_TOP_BOTTOM)
            assert top > 0 and bottom <= 800, (top, bottom)
            error = page.locator(".field-last_error_summary .pqjobs-error")
            expect(error).to_contain_text(f"PermanentError: {message.partition(': ')[2]}")
            expect(error).to_contain_text('tests/testapp/jobs.py", line ')  # where it was raised
            assert error.evaluate(_TOP_BOTTOM)[1] <= 800
            if shots:
                page.screenshot(path=f"{shots}/failed-job.png")
            # Retry (it applies) and Run now (it does not) are the same shape as History;
            # the disabled one is readable, not faded out.
            tools = page.locator(".object-tools")
            retry = tools.get_by_role("button", name="Retry")
            run_now = tools.get_by_role("button", name="Run now")
            history = tools.get_by_role("link", name="History")
            assert run_now.is_disabled() and retry.is_enabled()
            assert retry.evaluate(_SHAPE) == history.evaluate(_SHAPE) == run_now.evaluate(_SHAPE)
            assert run_now.evaluate("e => getComputedStyle(e).opacity") == "1"
        finally:
            context.close()


def test_an_operator_follows_a_batch_to_its_failed_member_and_back(sync_api, live_server, tmp_path):
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    with batch(label="nightly-invoices", on_finish="tests.noop", callback_payload={"n": 1}) as b:
        for n in range(6):
            enqueue_job("tests.noop", {"n": n})
        failing = enqueue_job("tests.permanent")
    drain()
    shots = os.environ.get("PQJOBS_SCREENSHOTS")  # a directory, to look at the pages
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api, playwright, tmp_path, live_server, viewport={"width": 1280, "height": 800}
        )
        try:
            expect = sync_api.expect
            page.goto(f"{live_server.url}/admin/django_pqjobs/batch/")
            row = page.locator("#result_list tbody tr").first
            expect(row).to_contain_text("7 / 7 finished")
            expect(row.locator(".pqjobs-bar-failed")).to_be_visible()
            if shots:
                page.screenshot(path=f"{shots}/batch-list.png", full_page=True)
            row.get_by_role("link", name="nightly-invoices").click()
            expect(page.locator(".field-state")).to_contain_text("finished once")
            expect(page.locator(".field-callback_job_links")).to_contain_text("tests.noop")
            if shots:
                page.screenshot(path=f"{shots}/batch-page.png", full_page=True)
            failed_row = page.locator(".pqjobs-members tr", has_text="failed")
            failed_row.get_by_role("link", name="list them").click()
            expect(page).to_have_url(re.compile(rf"batch__id__exact={b.id}&status__exact=failed"))
            rows = page.locator("#result_list tbody tr")
            expect(rows).to_have_count(1)
            rows.first.get_by_role("link", name=str(failing)).click()
            expect(page.locator(".field-member_of")).to_contain_text(f"batch #{b.id}")
            if shots:
                page.screenshot(path=f"{shots}/batch-member.png", full_page=True)
            page.locator(".field-member_of").get_by_role("link").click()
            expect(page.locator(".field-counts")).to_contain_text("7 members: 6 done, 1 failed")
            # On a phone the batch page does not scroll sideways.
            page.set_viewport_size({"width": 390, "height": 844})
            page.reload()
            assert page.evaluate("document.documentElement.scrollWidth") <= 390
            if shots:
                page.screenshot(path=f"{shots}/batch-phone.png", full_page=True)
        finally:
            context.close()
