"""The console's pictures as drawn (``admin/pictures.py``), without a database: well-formed
SVG, hostile text escaped and cut short, bounded size, colours by status."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from django_pqjobs.admin import pictures
from django_pqjobs.admin.display import STATUS_COLOURS
from django_pqjobs.admin.pictures import (
    AttemptRow,
    Graph,
    Node,
    Span,
    StepRow,
    active_svg,
    graph_svg,
    job_node,
    job_spans,
    more_node,
    timeline_svg,
)
from django_pqjobs.models import CALENDAR_END, Job

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
HOSTILE = '<script>alert("x")</script> & \x00 \ud800 \x1b[31m' + "A" * 10_000_000


def parsed(svg: str) -> ET.Element:
    """The picture parsed as XML (it fails on anything not well-formed)."""
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def texts(root: ET.Element) -> list[str]:
    return [e.text or "" for e in root.iter() if e.tag in (f"{SVG}text", f"{SVG}title")]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def a_job(**fields) -> Job:
    values = {
        "id": 7,
        "job_type": "shop.jobs.send_receipt",
        "queue": "default",
        "status": "done",
        "attempts": 3,
        "created_at": at(0),
        "run_after": at(0),
        "locked_at": at(100),
        "locked_by": "web-1",
        "finished_at": at(130),
    }
    values.update(fields)
    return Job(**values)


def test_a_jobs_timeline_has_its_waits_attempts_steps_and_actions_in_order():
    attempts = [
        AttemptRow(1, "error", at(10), at(20), "web-1"),
        AttemptRow(2, "snoozed", at(50), at(51), "web-2"),
    ]
    steps = [
        StepRow("charge", "step", at(101), at(102), None),
        StepRow("nap", "sleep", at(103), at(110), at(110)),
    ]

    class Event:
        at = T0 + timedelta(seconds=40)
        verb = "retried"
        actor = "alice"

    spans = job_spans(a_job(), attempts, steps, [Event()], now=at(200))
    assert [(s.kind, s.label) for s in spans] == [
        ("created", "created"),
        ("queued", "waited to start"),
        ("attempt-failed", "attempt 1: error"),
        ("retry-wait", "waited to retry"),
        ("operator", "retried by alice"),
        ("snoozed", "attempt 2: snoozed"),
        ("snoozed", "snoozed"),
        ("attempt-done", "attempt 3: done"),
        ("step", "step charge"),
        ("sleep", "sleep nap"),
        ("finished-done", "done"),
    ]
    root = parsed(timeline_svg(spans, at(200), "UTC"))
    shown = texts(root)
    assert "attempt 1: error" in shown and "sleep nap" in shown
    # exact times in each bar's tooltip
    assert any(
        "attempt 1: error: 2026-11-28 12:00:10 UTC → 2026-11-28 12:00:20" in t for t in shown
    )
    colours = {r.get("fill") for r in root.iter(f"{SVG}rect")}
    assert STATUS_COLOURS["failed"] in colours and STATUS_COLOURS["done"] in colours


def test_a_waiting_job_is_drawn_up_to_now_and_a_running_attempt_is_open():
    running = a_job(status="running", finished_at=None, attempts=1)
    spans = job_spans(running, [], [], [], now=at(150))
    assert spans[-1].kind == "attempt-running" and spans[-1].ongoing and spans[-1].end == at(150)
    parked = a_job(status="waiting", waiting_for=0, locked_at=None, finished_at=None, attempts=0)
    spans = job_spans(parked, [], [StepRow("wait", "signal", at(5), None, at(9999))], [], at(60))
    kinds = {s.kind: s for s in spans}
    assert kinds["parked"].ongoing and kinds["signal"].label == "signal wait: waiting"
    assert "times out" in kinds["signal"].note
    parsed(timeline_svg(spans, at(60)))


def test_the_timeline_is_bounded_and_survives_times_past_the_calendar():
    spans = [Span(at(n), at(n + 1), "step", f"step {n}") for n in range(5000)]
    spans.append(Span(at(1), CALENDAR_END, "sleep", "forever"))
    svg = timeline_svg(spans, at(6000))
    root = parsed(svg)
    assert len(root.findall(f"{SVG}g")) <= pictures.MAX_ROWS + 1
    assert "earlier not shown" in svg and len(svg) < 60_000


def test_hostile_names_are_escaped_and_cut_everywhere():
    span = Span(at(0), at(5), "step", HOSTILE, note=HOSTILE)
    svg = timeline_svg([span], at(10), time_zone=HOSTILE)
    graph = Graph(label=HOSTILE)
    graph.add(job_node(1, "failed", HOSTILE, focus=True))
    graph.add(Node("batch:1", HOSTILE, HOSTILE, "/b/1/?a=1&b=<x>", kind="batch"))
    graph.link("batch:1", "job:1", "member", HOSTILE)
    drawn = [
        svg,
        graph_svg(graph),
        active_svg([{"queue": HOSTILE, "status": "ready", "count": 3}], "/jobs/"),
    ]
    for picture in drawn:
        assert len(picture) < 20_000
        assert "<script" not in picture and "\x00" not in picture and "\x1b" not in picture
        picture.encode("utf-8")  # no lone surrogate left to break the response
        root = parsed(picture)
        assert any("&" in t for t in texts(root))  # drawn as text, escaped in the markup
    assert "&lt;script&gt;" in drawn[1]
    assert "/b/1/?a=1&amp;b=&lt;x&gt;" in drawn[1]


def test_a_10000_job_graph_draws_a_bounded_number_of_nodes_and_says_how_many_more():
    graph = Graph(label="batch 1")
    graph.add(Node("batch:1", "batch #1", "nightly", "/batch/1/", kind="batch"))
    for pk in range(1, 10_001):
        graph.add(job_node(pk, "done" if pk % 2 else "failed", "shop.jobs.charge"))
        graph.link("batch:1", f"job:{pk}", "member")
    graph.add(more_node("members", 9_000, "/jobs/?batch__id__exact=1"))
    svg = graph_svg(graph)
    root = parsed(svg)
    nodes = [a for a in root.iter(f"{SVG}a") if "pqjobs-node-job" in (a.get("class") or "")]
    assert len(nodes) == pictures.MAX_NODES
    assert len(svg) < 150_000
    assert "+9,000 more" in svg and "/jobs/?batch__id__exact=1" in svg
    assert "more not drawn" in svg


def test_nodes_are_coloured_by_status_and_link_to_their_job():
    graph = Graph()
    for pk, status in enumerate(["ready", "running", "done", "failed", "waiting"], start=1):
        graph.add(job_node(pk, status, "t"))
    graph.add(job_node(9, None))  # a job that is gone
    graph.link("job:1", "job:2", "depends")
    root = parsed(graph_svg(graph))
    for link in root.iter(f"{SVG}a"):
        status = link.get("data-status")
        rect = link.find(f"{SVG}rect")
        assert rect is not None
        expected = STATUS_COLOURS[status] if status else pictures.GONE_COLOUR
        assert rect.get("fill") == expected, status
        assert link.get("href", "").endswith(f"/job/{link.get('data-key', '')[4:]}/change/")
    # the dependency is drawn left to right: job 2 is in a later column than job 1
    x = {a.get("data-key"): float(a.find(f"{SVG}rect").get("x")) for a in root.iter(f"{SVG}a")}
    assert x["job:2"] > x["job:1"]


def test_the_active_jobs_picture_is_bounded_and_links_each_part():
    active = [
        {"queue": f"q{n}", "status": status, "count": n + 1}
        for n in range(50)
        for status in ("ready", "running")
    ]
    svg = active_svg(active, "/admin/django_pqjobs/job/")
    root = parsed(svg)
    parts = list(root.iter(f"{SVG}a"))
    assert len(parts) == 2 * pictures.MAX_QUEUES
    assert parts[0].get("href") == "/admin/django_pqjobs/job/?queue=q49&status__exact=running"
    assert "and 30 more queues" in svg
    assert active_svg([], "/") == ""


def test_clean_keeps_the_end_of_a_dotted_name():
    assert pictures.clean("a" * 50 + ".tasks.send", 12, keep_end=True) == "….tasks.send"
    assert pictures.clean("\x00ab", 10) == "\\x00ab"
    assert pictures.clean("x" * 40, 10) == "xxxxxxxxx…"


def test_attempts_the_page_did_not_read_are_not_taken_for_a_first_wait():
    attempts = [AttemptRow(21, "error", at(10), at(20), "web-1")]
    job = a_job(status="failed", attempts=21, locked_at=at(10), finished_at=at(20))
    spans = job_spans(job, attempts, [], [], now=at(30), earlier=20)
    assert (spans[1].kind, spans[1].label) == ("retry-wait", "20 earlier attempts (not drawn)")


def test_a_span_ending_before_it_starts_draws_no_negative_duration():
    # the page's clock a little behind the database's: "now" before an attempt's start
    svg = timeline_svg([Span(at(10), at(9), "attempt-running", "attempt 1: running")], at(9))
    root = parsed(svg)
    assert not any(t.startswith("-") for t in texts(root)), texts(root)
    widths = [r.get("width", "") for r in root.iter(f"{SVG}rect")]
    assert all(not w.startswith("-") for w in widths), widths
