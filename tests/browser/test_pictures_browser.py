"""The console's pictures and live pages in a real browser at 1280x800: a job page's
timeline and graph (a node is a link to its job), the dashboard and the job list updating
themselves when a job changes in the database, without a reload, the job list's actions
still working after an update, and Pause stopping the updates (remembered on reload).

``PQJOBS_SCREENSHOTS=<directory>`` keeps screenshots there. Needs what
``test_admin_browser.py`` needs (Debian's chromium and the playwright package).
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models.functions import Now

from django_pqjobs import JobGraph, batch, enqueue_job
from django_pqjobs.models import Job
from django_pqjobs.testing import drain
from tests.helpers import bound

from .test_admin_browser import logged_in_page, sync_api  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)

VIEWPORT = {"width": 1280, "height": 800}


def refresh_ms() -> float:
    """How long to wait for the pages' refresh (every 5 s), in ms: 15 s stretched by the
    load (helpers.bound)."""
    return bound(15) * 1000


def in_thread(change: Callable[[], object]) -> None:
    """Change the database from another thread: Playwright's event loop runs in this one,
    where Django refuses synchronous database access."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            change()
        except BaseException as exc:  # reported in the test's thread
            failures.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(bound(30))
    assert not thread.is_alive() and not failures, failures


def shot(page, name: str) -> None:
    shots = os.environ.get("PQJOBS_SCREENSHOTS")
    if shots:
        page.screenshot(path=f"{shots}/{name}.png")


def test_a_job_page_shows_its_timeline_and_a_graph_node_opens_that_job(
    sync_api,  # noqa: F811
    live_server,
    tmp_path,
):
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    graph = JobGraph()
    graph.add("fetch", "tests.noop")
    graph.add("broken", "tests.permanent")
    graph.add("merge", "tests.noop", depends_on=["fetch", "broken"], on_dependency_failure="run")
    graph.add("report", "tests.noop", depends_on=["merge"])
    ids = graph.enqueue()
    drain(["default"])  # fetch done, broken failed; merge and report run after them
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api, playwright, tmp_path, live_server, viewport=VIEWPORT
        )
        try:
            expect = sync_api.expect
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/{ids['merge']}/change/")
            timeline = page.locator("svg.pqjobs-job-timeline")
            expect(timeline).to_be_visible()
            expect(timeline).to_contain_text("attempt 1: done")
            expect(timeline).to_contain_text("waited to start")
            drawn = page.locator("svg.pqjobs-graph")
            expect(drawn).to_be_visible()
            node = drawn.locator(f'a[data-key="job:{ids["broken"]}"]')
            expect(node).to_have_attribute("data-status", "failed")
            assert node.locator("rect").evaluate("e => getComputedStyle(e).fill") == (
                "rgb(197, 48, 48)"  # the failed badge's colour
            )
            left, right = drawn.evaluate(
                "e => [e.getBoundingClientRect().left, e.getBoundingClientRect().right]"
            )
            assert left >= 0 and right <= 1280, (left, right)
            page.locator("#pqjobs-pictures").scroll_into_view_if_needed()
            shot(page, "pictures-job-page")
            node.click()
            expect(page).to_have_url(re.compile(rf"/job/{ids['broken']}/change/$"))
            expect(page.locator(".field-status_detail")).to_contain_text("failed")
            expect(page.locator("svg.pqjobs-job-timeline")).to_contain_text("attempt 1: permanent")
        finally:
            context.close()


@pytest.mark.slow  # waits for the pages' 5 s refreshes
def test_the_dashboard_and_the_job_list_update_live_and_pause(sync_api, live_server, tmp_path):  # noqa: F811
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    first = enqueue_job("tests.noop", queue="emails")
    second = enqueue_job("tests.noop", queue="emails")
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api, playwright, tmp_path, live_server, viewport=VIEWPORT
        )
        try:
            expect = sync_api.expect
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/dashboard/")
            toggle = page.locator(".breadcrumbs .pqjobs-live-toggle")
            expect(toggle).to_have_text("Pause")
            active = page.locator("svg.pqjobs-active")
            expect(active).to_contain_text("emails")
            page.evaluate("window.notReloaded = true")
            shot(page, "pictures-dashboard-before")

            # A worker finishes both: the dashboard says so without a reload.
            in_thread(
                lambda: Job.objects.filter(pk__in=[first, second]).update(
                    status="done", finished_at=Now(), locked_at=Now()
                )
            )
            expect(page.locator("#content-main")).to_contain_text(
                "No waiting, ready, blocked or running jobs.", timeout=refresh_ms()
            )
            expect(page.locator("svg.pqjobs-active")).to_have_count(0)
            assert page.evaluate("window.notReloaded === true")
            expect(page.locator(".pqjobs-live-state")).to_contain_text("updated")
            shot(page, "pictures-dashboard-after")

            # The job list: a row's status changes in place.
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/")
            page.evaluate("window.notReloaded = true")
            row = page.locator(
                "#result_list tbody tr", has=page.locator(f'a[href$="/job/{first}/change/"]')
            )
            expect(row.locator(".field-status_cell")).to_contain_text("done")
            in_thread(lambda: Job.objects.filter(pk=first).update(status="failed"))
            expect(row.locator(".field-status_cell")).to_contain_text(
                "failed", timeout=refresh_ms()
            )
            assert page.evaluate("window.notReloaded === true")
            assert page.evaluate("window.pqjobsLive.updates") >= 1

            # Django's action boxes work on the updated rows; a checked box holds updates.
            row.locator("input.action-select").check()
            expect(page.locator(".action-counter")).to_contain_text("1 of 2 selected")
            in_thread(lambda: Job.objects.filter(pk=first).update(status="expired"))
            # the next refresh after the change is skipped, and the row keeps what it showed
            page.evaluate("window.pqjobsLive.skipped = ''")
            page.wait_for_function(
                "window.pqjobsLive.skipped === 'a box is checked'", timeout=refresh_ms()
            )
            expect(row.locator(".field-status_cell")).to_contain_text("failed")
            page.select_option("select[name=action]", "retry_action")
            page.locator("#changelist-form button[name=index]").click()
            expect(page.locator("ul.messagelist")).to_contain_text("1 job put back to ready")
            shot(page, "pictures-job-list-after-action")

            # Pause: nothing changes any more, and the choice outlives a reload.
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/")
            row = page.locator(
                "#result_list tbody tr", has=page.locator(f'a[href$="/job/{second}/change/"]')
            )
            toggle = page.locator(".breadcrumbs .pqjobs-live-toggle")
            toggle.click()
            expect(toggle).to_have_text("Resume")
            expect(page.locator(".pqjobs-live-state")).to_have_text("live paused")
            in_thread(lambda: Job.objects.filter(pk=second).update(status="cancelled"))
            page.wait_for_timeout(7_000)
            expect(row.locator(".field-status_cell")).to_contain_text("done")
            shot(page, "pictures-job-list-paused")
            page.reload()
            expect(row.locator(".field-status_cell")).to_contain_text("cancelled")
            expect(page.locator(".breadcrumbs .pqjobs-live-toggle")).to_have_text("Resume")
            page.evaluate("window.notReloaded = true")
            in_thread(lambda: Job.objects.filter(pk=second).update(status="failed"))
            page.locator(".breadcrumbs .pqjobs-live-toggle").click()  # Resume
            expect(row.locator(".field-status_cell")).to_contain_text(
                "failed", timeout=refresh_ms()
            )
            assert page.evaluate("window.notReloaded === true")
        finally:
            context.close()


def test_a_workflows_timeline_and_a_batch_graph_whose_node_opens_a_member(
    sync_api,  # noqa: F811
    live_server,
    tmp_path,
):
    User.objects.create_user("oncall", password="pw-oncall", is_superuser=True, is_staff=True)
    flow = enqueue_job("tests.workflow", {"order": "o-7"})
    drain()  # charge and provision, then parked in its durable sleep
    with batch(label="nightly <invoices> & co") as b:
        for n in range(60):
            enqueue_job("tests.noop", {"n": n})
        failing = enqueue_job("tests.permanent")
    drain()
    with sync_api.sync_playwright() as playwright:
        context, page = logged_in_page(
            sync_api, playwright, tmp_path, live_server, viewport=VIEWPORT
        )
        try:
            expect = sync_api.expect
            page.goto(f"{live_server.url}/admin/django_pqjobs/job/{flow}/change/")
            timeline = page.locator("svg.pqjobs-job-timeline")
            expect(timeline).to_contain_text("attempt 1: parked")
            expect(timeline).to_contain_text("step charge")
            expect(timeline).to_contain_text("sleep cool-off: waiting")
            timeline.scroll_into_view_if_needed()
            shot(page, "pictures-workflow-timeline")

            page.goto(f"{live_server.url}/admin/django_pqjobs/batch/{b.id}/change/")
            drawn = page.locator("svg.pqjobs-graph")
            expect(drawn).to_contain_text("+13 more")  # 61 members, 48 drawn
            expect(drawn.locator("a.pqjobs-node-batch")).to_contain_text("nightly <invoices>")
            drawn.scroll_into_view_if_needed()
            shot(page, "pictures-batch-graph")
            more = drawn.locator("a.pqjobs-node-more")
            expect(more).to_have_attribute("href", re.compile(rf"batch__id__exact={b.id}$"))
            # the failed member is the 61st: not drawn, a click on "more" lists it
            more.click()
            expect(page).to_have_url(re.compile(rf"batch__id__exact={b.id}$"))
            page.goto(f"{live_server.url}/admin/django_pqjobs/batch/{b.id}/change/")
            first = page.locator("svg.pqjobs-graph a.pqjobs-node-job").first
            key = first.get_attribute("data-key") or ""
            first.click()
            expect(page).to_have_url(re.compile(rf"/job/{key.split(':')[1]}/change/$"))
            expect(page.locator("svg.pqjobs-graph")).to_contain_text(f"batch #{b.id}")
            assert failing > int(key.split(":")[1])
        finally:
            context.close()
