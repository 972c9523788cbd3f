"""The console's first screens in a real browser at 1280x800: a failed job's error, payload
and attempts, a job on a stale worker with Release, a waiting workflow's steps, all without
scrolling; at least 15 rows of the job list, their job types each on one line; the
dashboard linked from the admin's index and sidebar; one way to show time.

``PQJOBS_SCREENSHOTS=<directory>`` keeps screenshots of the pages there. Harness and
requirements: ``test_admin_browser.py``.
"""

from __future__ import annotations

import importlib
import os
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db.models.functions import Now
from django.utils import timezone

from django_pqjobs import capacity, enqueue_job, fairness, operations
from django_pqjobs.models import Job, WorkerRecord
from django_pqjobs.testing import drain
from django_pqjobs.worker.claiming import claim_jobs
from tests import fast_flush
from tests.browser import test_admin_browser as harness
from tests.browser.test_admin_browser import _TOP_BOTTOM, logged_in_page

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quiet_queue() -> None:
    """Start from an empty queue: what these tests measure is the first screen of a job in
    a quiet system, and flushes come after transactional tests only, so a row an earlier
    test committed outside its transaction (a pause, a worker) would add its banner above
    it. (Added when these tests failed in a whole CI run; that failure had the same offsets
    as Django 6.1's stacked labels, fixed in styles.html, so such a leak is not proven.)"""
    fast_flush.empty_tables("default")


LAPTOP = {"width": 1280, "height": 800}


@pytest.fixture
def sync_api():
    """Playwright's sync API, on Debian's Chromium (as ``test_admin_browser.py`` needs)."""
    if not harness.CHROMIUM.exists():
        harness._unavailable(f"{harness.CHROMIUM} is missing (Debian package chromium)")
    try:
        return importlib.import_module("playwright.sync_api")
    except ImportError:
        harness._unavailable("the playwright package is not installed")


# How many lines an element's text takes (its client rects' distinct tops).
_LINES = """e => {
  const range = document.createRange();
  range.selectNodeContents(e);
  const rects = [...range.getClientRects()].filter(r => r.width > 0);
  return new Set(rects.map(r => Math.round(r.top))).size;
}"""
# The one format of a time: date, time and zone, then its age beside it (in a list
# column, under it, with what happened then).
ABSOLUTE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [A-Z]{2,5}")
AGE = re.compile(r"(just now|in a few s|\d+ (s|min|h|d) ago|in \d+ (s|min|h|d))")
_TIMES = """e => [...e.querySelectorAll('time')].map(t => [
  t.innerText, t.nextElementSibling ? t.nextElementSibling.innerText : ''])"""


def shot(page, name: str) -> None:
    """Keep a screenshot of the first screen under ``PQJOBS_SCREENSHOTS``."""
    where = os.environ.get("PQJOBS_SCREENSHOTS")
    if where:
        page.screenshot(path=f"{where}/{name}.png")


def operator() -> None:
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)


def below_the_fold(locator) -> float:
    """The bottom of an element, in px from the top of the page (scrolled to the top)."""
    return locator.evaluate(_TOP_BOTTOM)[1]


def test_a_failed_jobs_error_payload_and_attempts_are_on_its_first_screen(
    sync_api, live_server, tmp_path
):
    operator()
    # a payload of some size: it scrolls in its own box, the attempts stay in view
    lines = [{"sku": f"sku-{n}", "quantity": n} for n in range(40)]
    job_id = enqueue_job(
        "tests.permanent", {"card": "4242", "order": 42, "lines": lines}, max_attempts=1
    )
    drain()
    assert Job.objects.get(pk=job_id).status == "failed"
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(sync_api, playwright, tmp_path, live_server, viewport=LAPTOP)
        try:
            expect = sync_api.expect
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/{job_id}/change/")
            error = page.locator(".field-last_error_summary .pqjobs-error")
            payload = page.locator(".field-payload_pretty .readonly")
            attempts = page.locator(".field-attempt_table table tbody tr").first
            expect(error).to_contain_text("PermanentError")
            expect(payload).to_contain_text('"order": 42')
            expect(attempts).to_contain_text("Permanent error")
            for what, locator in (("error", error), ("payload", payload), ("attempt", attempts)):
                assert below_the_fold(locator) <= 800, what
            for empty in ("dedupe_key", "key_held", "sequence", "fair", "why_waiting", "links"):
                expect(page.locator(f".field-{empty}")).to_have_count(0)
            shot(page, "failed-job-first-screen")
        finally:
            context.close()


def test_a_job_on_a_stale_worker_says_so_with_release_on_its_first_screen(
    sync_api, live_server, tmp_path
):
    operator()
    job_id = enqueue_job("tests.echo", {"n": 1})
    WorkerRecord.objects.create(
        worker_id="doomed",
        hostname="web-1",
        pid=7,
        heartbeat_at=timezone.now() - timedelta(minutes=10),
    )
    claim_jobs("default", "doomed", None, 1)
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(sync_api, playwright, tmp_path, live_server, viewport=LAPTOP)
        try:
            expect = sync_api.expect
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/{job_id}/change/")
            state = page.locator(".field-worker_state")
            expect(state).to_contain_text(re.compile(r"worker stale for \d+ s"))
            expect(state).to_contain_text(re.compile(r"last heartbeated \d+ s ago"))
            release = state.get_by_role("link", name="Release…")
            expect(release).to_be_visible()
            assert below_the_fold(release) <= 800
            shot(page, "stale-worker-job")
            # the list flags it too
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/?status__exact=running")
            row = page.locator("#result_list tbody tr").first
            expect(row.locator(".pqjobs-stale-worker")).to_contain_text("worker stale for")
            colour = row.locator(".pqjobs-stale-worker").evaluate("e => getComputedStyle(e).color")
            red, green, _ = (int(c) for c in re.findall(r"\d+", colour)[:3])
            assert red > 150 and green < 100, colour
            release.page.go_back()
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/{job_id}/change/")
            page.locator(".field-worker_state").get_by_role("link", name="Release…").click()
            expect(page.get_by_role("button", name=re.compile("Release"))).to_be_visible()
        finally:
            context.close()


def test_a_waiting_workflows_steps_are_on_its_first_screen(sync_api, live_server, tmp_path):
    operator()
    job_id = enqueue_job("tests.workflow", {"order": "o-1"})
    drain()
    assert Job.objects.get(pk=job_id).status == "waiting"
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(sync_api, playwright, tmp_path, live_server, viewport=LAPTOP)
        try:
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/{job_id}/change/")
            steps = page.locator(".field-workflow_steps")
            sync_api.expect(steps).to_contain_text("cool-off")
            assert below_the_fold(steps) <= 800  # every step, sleep and wait of it
            assert "failed attempt" not in page.locator("#content").inner_text().lower()
            shot(page, "waiting-workflow")
        finally:
            context.close()


def many_jobs() -> None:
    """60 jobs of long dotted type names in every status the list shows."""
    names = [
        "billing.invoices.tasks.charge_customer_invoice",
        "notifications.email.send_weekly_digest",
        "tests.effect_quick_retry",
    ]
    for n in range(60):
        job_id = enqueue_job("t", {"n": n}, queue="billing-and-invoices")
        Job.objects.filter(pk=job_id).update(job_type=names[n % 3])  # (no handler needed)
    Job.objects.filter(pk__in=Job.objects.order_by("pk").values("pk")[:20]).update(
        status="failed",
        attempts=5,
        max_attempts=5,
        finished_at=Now(),
        last_error="Traceback (most recent call last):\nConnectionError: the payment gateway "
        "reset the connection while charging the invoice (upstream said 502)",
        error_type="ConnectionError",
    )
    Job.objects.filter(pk__in=Job.objects.order_by("-pk").values("pk")[:20]).update(
        status="done", finished_at=Now(), duration_ms=1234
    )


def test_the_job_list_shows_15_rows_with_unbroken_type_names_at_1280x800(
    sync_api, live_server, tmp_path
):
    operator()
    many_jobs()
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(sync_api, playwright, tmp_path, live_server, viewport=LAPTOP)
        try:
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/")
            sync_api.expect(page.locator("#nav-sidebar")).to_be_visible()
            rows = page.locator("#result_list tbody tr")
            sync_api.expect(rows).to_have_count(50)
            bottoms = rows.evaluate_all("rs => rs.map(r => r.getBoundingClientRect().bottom)")
            visible = sum(1 for bottom in bottoms if bottom <= 800)
            shot(page, "job-list")
            assert visible >= 15, bottoms[:20]
            assert page.locator("#changelist-form .results").evaluate(
                "e => e.scrollWidth <= e.clientWidth + 1"
            ), "the job list scrolls sideways"
            names = page.locator("#result_list tbody tr .pqjobs-type")
            assert names.count() == 50
            for n in range(names.count()):
                name = names.nth(n)
                assert name.evaluate(_LINES) == 1, name.inner_text()
        finally:
            context.close()


def test_the_dashboard_is_linked_from_the_index_and_the_sidebar(sync_api, live_server, tmp_path):
    operator()
    failed = enqueue_job("tests.permanent", max_attempts=1)
    drain()
    WorkerRecord.objects.create(
        worker_id="stuck-7", hostname="h", pid=1, heartbeat_at=timezone.now() - timedelta(hours=1)
    )
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(sync_api, playwright, tmp_path, live_server, viewport=LAPTOP)
        try:
            expect = sync_api.expect
            page.goto(f"{live_server.url}/admin/")
            expect(
                page.locator("#content-main").get_by_role("link", name="Dashboard")
            ).to_be_visible()
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/")
            sidebar = page.locator("#nav-sidebar").get_by_role("link", name="Dashboard")
            expect(sidebar).to_be_visible()
            sidebar.click()
            banner = page.locator(".pqjobs-stale-banner")
            expect(banner).to_contain_text("1 stale worker")
            assert below_the_fold(banner) <= 800
            failing = page.locator("#pqjobs-failing").get_by_role("link", name="1 failed")
            assert below_the_fold(failing) <= 800
            stale_row = page.locator("#pqjobs-workers tr.pqjobs-stale")
            colour = stale_row.locator("td").first.evaluate("e => getComputedStyle(e).color")
            red, green, _ = (int(c) for c in re.findall(r"\d+", colour)[:3])
            assert red > 150 and green < 100, colour
            shot(page, "dashboard")
            failing.click()
            rows = page.locator("#result_list tbody tr")
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text(str(failed))
        finally:
            context.close()


def test_every_page_shows_time_one_way(sync_api, live_server, tmp_path):
    """A time reads as its date, time and zone with its age, on each page that shows one."""
    operator()
    job_id = enqueue_job("tests.echo", {"n": 1})
    cancelled = enqueue_job("tests.echo", {"n": 2})
    operations.cancel_jobs([cancelled], by="oncall")  # a row of the audit trail
    drain()
    WorkerRecord.objects.create(worker_id="w-1", hostname="h", pid=1)
    capacity.set_concurrency(3, name="web")
    fairness.set_fair_weight("tenant:1", 4)
    pages = [
        f"/admin/django_pqjobs/job/{job_id}/change/",
        "/admin/django_pqjobs/job/",
        "/admin/django_pqjobs/job/dashboard/",
        "/admin/django_pqjobs/fairweight/",
        "/admin/django_pqjobs/concurrencysetting/",
        "/admin/django_pqjobs/operatoraction/",
    ]
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(sync_api, playwright, tmp_path, live_server, viewport=LAPTOP)
        try:
            for url in pages:
                page.goto(f"{live_server.url}{url}")
                content = page.locator("#content")
                times = content.evaluate(_TIMES)
                assert times, url
                for shown, beside in times:
                    assert ABSOLUTE.fullmatch(shown.strip()), (url, shown)
                    assert AGE.search(beside), (url, shown, beside)
                said = content.inner_text()
                assert "a.m." not in said and "p.m." not in said, url
        finally:
            context.close()
