"""The console's pictures and live pages as the pages serve them: the job page's timeline
and graph, the batch page's graph, the dashboard's active jobs, the live script on the
dashboard, the job page, the job list and the batch page."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from django.test import Client
from django.urls import reverse

from django_pqjobs import JobGraph, batch, enqueue_batch, enqueue_job
from django_pqjobs.admin import pictures
from django_pqjobs.admin.display import STATUS_COLOURS
from django_pqjobs.models import Job, JobAttempt, Step
from django_pqjobs.testing import drain

from ..helpers import make_user

pytestmark = pytest.mark.django_db(transaction=True)

SVG = "{http://www.w3.org/2000/svg}"
JOBS = reverse("admin:django_pqjobs_job_changelist")
DASHBOARD = reverse("admin:django_pqjobs_job_dashboard")


def job_url(job_id: int) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[job_id])


def batch_url(batch_id: int) -> str:
    return reverse("admin:django_pqjobs_batch_change", args=[batch_id])


@pytest.fixture
def viewer() -> Client:
    return make_user("viewer", "view_job")


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
    return response.content.decode()


def picture(html: str, css_class: str) -> ET.Element:
    """The page's SVG of this class, parsed as XML (well-formed, or this fails)."""
    found = re.findall(r"<svg\b.*?</svg>", html, flags=re.S)
    chosen = [svg for svg in found if re.search(rf'class="[^"]*\b{css_class}\b', svg)]
    assert len(chosen) == 1, (css_class, len(chosen))
    return ET.fromstring(chosen[0])


def texts(root: ET.Element) -> str:
    return "\n".join(e.text or "" for e in root.iter() if e.tag in (f"{SVG}text", f"{SVG}title"))


def nodes(root: ET.Element) -> dict[str, str]:
    """The graph's job nodes: key -> status."""
    return {
        a.get("data-key", ""): a.get("data-status", "")
        for a in root.iter(f"{SVG}a")
        if "pqjobs-node-job" in (a.get("class") or "")
    }


def test_a_workflow_jobs_page_draws_its_timeline_of_attempts_steps_and_sleep(viewer):
    job_id = enqueue_job("tests.workflow", {"order": "o-1", "secret": "hunter2-payload"})
    drain()  # charge, provision, then parked in its durable sleep
    JobAttempt.objects.create(
        job_id=job_id, attempt=0, outcome="error", error_type="ValueError", traceback="boom-tb"
    )
    html = page(viewer, job_url(job_id))
    timeline = picture(html, "pqjobs-job-timeline")
    drawn = texts(timeline)
    for label in ("created", "attempt 1: parked", "step charge", "step provision"):
        assert label in drawn, label
    assert "sleep cool-off: waiting" in drawn and "wakes " in drawn
    assert "hunter2-payload" not in drawn and "boom-tb" not in drawn
    kinds = {g.get("class") for g in timeline.iter(f"{SVG}g")}
    assert {"pqjobs-span pqjobs-span-parked", "pqjobs-span pqjobs-span-sleep"} <= kinds
    assert 'id="pqjobs-pictures"' in html
    assert "data-pqjobs-live" in html  # the page is live


def test_an_encrypted_jobs_pictures_hold_nothing_of_its_payload(viewer):
    job_id = enqueue_job("tests.encrypted_echo", {"card": "4111-SECRET-CARD"})
    drain()
    html = page(viewer, job_url(job_id))
    timeline = picture(html, "pqjobs-job-timeline")
    assert "attempt 1: done" in texts(timeline)
    svgs = "".join(re.findall(r"<svg\b.*?</svg>", html, flags=re.S))
    assert "4111-SECRET-CARD" not in svgs and "echo" not in svgs.replace("encrypted_echo", "")


def test_a_job_page_draws_its_dependencies_and_dependents_linked_and_coloured(viewer):
    graph = JobGraph()
    graph.add("fetch", "tests.noop")
    graph.add("broken", "tests.permanent")
    graph.add("merge", "tests.noop", depends_on=["fetch", "broken"], on_dependency_failure="run")
    graph.add("after", "tests.noop", depends_on=["merge"])
    ids = graph.enqueue()
    drain(["default"])
    html = page(viewer, job_url(ids["merge"]))
    drawn = picture(html, "pqjobs-graph")
    found = nodes(drawn)
    assert set(found) == {f"job:{ids[n]}" for n in ("fetch", "broken", "merge", "after")}
    assert found[f"job:{ids['broken']}"] == "failed"
    for link in drawn.iter(f"{SVG}a"):
        key, status = link.get("data-key", ""), link.get("data-status", "")
        assert link.get("href") == job_url(int(key.split(":")[1]))
        assert link.find(f"{SVG}rect").get("fill") == STATUS_COLOURS[status]
    assert (
        len([p for p in drawn.iter(f"{SVG}path") if "pqjobs-edge" in (p.get("class") or "")]) == 3
    )
    # A job with nothing around it has a timeline and no graph.
    plain = page(viewer, job_url(enqueue_job("tests.noop")))
    assert "pqjobs-job-timeline" in plain and "pqjobs-graph" not in plain


def test_a_parent_and_its_children_are_drawn(viewer):
    parent = enqueue_job("tests.noop")
    children = [enqueue_job("tests.echo", {"n": n}) for n in range(3)]
    Job.objects.filter(pk__in=children).update(parent_id=parent)
    html = page(viewer, job_url(parent))
    assert set(nodes(picture(html, "pqjobs-graph"))) == {f"job:{pk}" for pk in [parent, *children]}
    child = page(viewer, job_url(children[0]))
    assert f"job:{parent}" in nodes(picture(child, "pqjobs-graph"))


def test_a_big_batch_page_draws_a_bounded_graph_and_links_the_rest(viewer):
    big = enqueue_batch("tests.noop", [{"n": n} for n in range(120)], label="nightly <&> run")
    html = page(viewer, batch_url(big.id))
    drawn = picture(html, "pqjobs-graph")
    assert len(nodes(drawn)) == pictures.MAX_NODES
    more = f"{JOBS}?batch__id__exact={big.id}"
    assert f"+{120 - pictures.MAX_NODES} more" in texts(drawn)
    assert any(a.get("href") == more for a in drawn.iter(f"{SVG}a"))
    assert f'And {120 - pictures.MAX_NODES} more members: <a href="{more}">' in html
    assert "nightly &lt;&amp;&gt; run" in html and "nightly <&> run" not in html
    assert "data-pqjobs-live" in html


def test_a_batch_graph_draws_members_by_status_and_its_callback(viewer):
    with batch(label="small", on_finish="tests.noop") as b:
        ok = enqueue_job("tests.noop")
        failing = enqueue_job("tests.permanent")
    drain()
    drawn = picture(page(viewer, batch_url(b.id)), "pqjobs-graph")
    found = nodes(drawn)
    assert found[f"job:{ok}"] == "done" and found[f"job:{failing}"] == "failed"
    callbacks = Job.objects.filter(callback_of_id=b.id).values_list("pk", flat=True)
    assert all(f"job:{pk}" in found for pk in callbacks) and callbacks


def test_the_dashboard_draws_active_jobs_by_queue_and_is_live(viewer):
    enqueue_job("tests.noop", queue="emails")
    enqueue_job("tests.noop", queue="emails")
    enqueue_job("tests.noop", queue="reports", delay=3600)
    html = page(viewer, DASHBOARD)
    drawn = picture(html, "pqjobs-active")
    links = {a.get("href") for a in drawn.iter(f"{SVG}a")}
    assert f"{JOBS}?queue=emails&status__exact=ready" in links
    assert "queue emails: 2 ready" in texts(drawn)
    assert "data-pqjobs-live" in html and 'data-region="#content-main"' in html
    assert "pqjobs-chart" in html  # beside the throughput chart


def test_the_job_list_is_live_in_its_results_form(viewer):
    html = page(viewer, JOBS)
    assert 'data-region="#changelist-form"' in html and "data-pqjobs-live" in html


def test_hostile_names_on_the_job_page_draw_escaped(viewer, unknown_job_types_allowed):
    evil = "<script>alert(1)</script>&\u202e" + "x" * 150
    job_id = enqueue_job(evil, queue="q")
    Step.objects.create(job_id=job_id, name=evil[:200], kind="step", attempt=1)
    parent = enqueue_job(evil)
    Job.objects.filter(pk=job_id).update(parent_id=parent)
    html = page(viewer, job_url(job_id))
    assert "step <script>alert(1)" in texts(picture(html, "pqjobs-job-timeline"))  # as text
    assert f"job:{parent}" in nodes(picture(html, "pqjobs-graph"))
    svgs = "".join(re.findall(r"<svg\b.*?</svg>", html, flags=re.S))
    assert "<script>" not in svgs and "x" * 100 not in svgs and "\u202e" not in svgs
