"""Pictures on the console's pages, drawn on the server as SVG like the dashboard's
throughput chart: a job's timeline (its waits, attempts, sleeps, snoozes, parks, workflow
steps and what operators did, on one time axis), a graph of the jobs around a job or in a
batch (nodes coloured by status, each a link to its job's page), and the dashboard's
active jobs by queue.

The drawing functions (``*_svg``) are pure: they take data, never read the database, and
escape every text they draw (``format_html``). Text that comes from outside (job types,
step names, queue names, operators' names) is made printable and cut short first, so a NUL,
a lone surrogate or a 10 MB name draws as a few escaped characters. Nothing of a job's
payload, result or error is ever drawn: only ids, statuses, types, names and times. Each
picture is bounded (``MAX_ROWS``, ``MAX_NODES``, ``MAX_QUEUES``), so a 10,000-job batch
draws the same few kilobytes as a small one and says how many it leaves out, with a link.

The gathering functions (``job_pictures``, ``batch_pictures``, ``dashboard_pictures``)
read what the pictures need with a few small queries, beside what the page already read
(``excerpts.JobPage``, ``composition.JobLinks``, ``dashboard.Dashboard``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from django.db import connections
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..models import CALENDAR_END, CALENDAR_START, Job
from ..printable import printable
from ..sql import queries
from . import composition, display, excerpts

QUERIES = queries("admin_pictures")

MAX_ROWS = 40  # of a timeline
MAX_NODES = 48  # of a graph, the "more" nodes aside
MAX_QUEUES = 20  # of the dashboard's active jobs
LABEL_CHARS = 34  # drawn beside a bar or in a node
TITLE_CHARS = 200  # of a tooltip's outside text
SHOWN_STEPS = 200  # a workflow's steps read for its timeline (as its steps table)

# The admin's colours (light and dark themes) where it has them, as the throughput chart.
_BACKGROUND = "fill: var(--darkened-bg, #f7fafc)"
_TEXT = "fill: var(--body-quiet-color, #4a5568)"
_STRONG_TEXT = "fill: var(--body-fg, #333)"
_LINE = "stroke: var(--body-quiet-color, #4a5568)"
_GRID = "stroke: var(--hairline-color, #e2e8f0)"

# What each kind of timeline bar is, and its colour (statuses' colours where one applies).
KIND_COLOURS = {
    "created": "#4a5568",
    "queued": display.STATUS_COLOURS["ready"],
    "scheduled": "#90cdf4",
    "retry-wait": "#dd6b20",
    "blocked": display.STATUS_COLOURS["blocked"],
    "dependencies": display.STATUS_COLOURS["waiting"],
    "attempt-done": display.STATUS_COLOURS["done"],
    "attempt-failed": display.STATUS_COLOURS["failed"],
    "attempt-running": display.STATUS_COLOURS["running"],
    "attempt-given-back": display.STATUS_COLOURS["cancelled"],
    "snoozed": "#805ad5",
    "parked": display.STATUS_COLOURS["waiting"],
    "step": "#2b6cb0",
    "sleep": "#319795",
    "signal": "#6b46c1",
    "child": "#3182ce",
    "operator": "#1a202c",
    **{f"finished-{status}": colour for status, colour in display.STATUS_COLOURS.items()},
}
UNKNOWN_COLOUR = "#4a5568"
GONE_COLOUR = "#a0aec0"
BATCH_COLOUR = "#4a5568"

# Attempt outcomes (``FailureKind``) that gave the attempt back rather than failing it.
_GIVEN_BACK = {"released": "attempt-given-back", "snoozed": "snoozed", "parked": "parked"}
# After an attempt with this outcome, the job waited for...
_GAP_AFTER = {
    "snoozed": ("snoozed", "snoozed"),
    "parked": ("parked", "parked"),
    "released": ("queued", "waited for a worker"),
}


def clean(text: object, limit: int = LABEL_CHARS, keep_end: bool = False) -> str:
    """``text`` safe to draw: printable (control characters, NULs and lone surrogates
    escaped), at most ``limit`` characters (cut with "…", at the end, or at the start with
    ``keep_end``: a dotted job type is told by its last parts). Escaping for markup is
    ``format_html``'s."""
    raw = str(text)
    long = len(raw) > limit
    if long:
        raw = raw[-limit:] if keep_end else raw[:limit]
    shown = printable(raw)
    if long or len(shown) > limit:
        shown = "…" + shown[-(limit - 1) :] if keep_end else shown[: limit - 1] + "…"
    return shown


# --- the timeline ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One row of a timeline: a bar from ``start`` to ``end``, or a mark (``end`` None)."""

    start: datetime
    end: datetime | None
    kind: str  # a key of KIND_COLOURS
    label: str
    note: str = ""  # more for the tooltip (never a payload, a result or an error)
    ongoing: bool = False  # not over: drawn to ``now``


@dataclass(frozen=True)
class StepRow:
    """A workflow step as the timeline reads it (its result is never read)."""

    name: str
    kind: str
    started_at: datetime | None
    finished_at: datetime | None
    wake_at: datetime | None


@dataclass(frozen=True)
class AttemptRow:
    """An attempt of the history as the timeline reads it."""

    attempt: int
    outcome: str
    started_at: datetime | None
    finished_at: datetime | None
    worker_id: str = ""


def job_spans(
    job: Job,
    attempts: Sequence[AttemptRow],
    steps: Sequence[StepRow],
    events: Iterable[Any],
    now: datetime,
    earlier: int = 0,
) -> list[Span]:
    """A job's timeline, oldest first: created; each wait (in the queue, before a retry,
    snoozed, parked, blocked, for its dependencies); each attempt; each workflow step,
    sleep, wait for a signal or for a child job; each operator action (``events``: rows of
    ``audit.job_events``); how it finished. ``earlier``: how many attempts before
    ``attempts`` the history holds (the job page reads the latest ones)."""
    spans = [Span(job.created_at, None, "created", "created", f"queue {job.queue}")]
    recorded = {a.attempt for a in attempts}
    runs: list[tuple[datetime, datetime | None, str, str, int]] = []
    for a in attempts:
        if a.finished_at is None:
            continue
        start = a.started_at or a.finished_at
        kind = _GIVEN_BACK.get(a.outcome, "attempt-failed")
        runs.append((start, a.finished_at, kind, a.outcome, a.attempt))
    if job.locked_at is not None and job.attempts not in recorded:
        if job.status == "running":
            runs.append((job.locked_at, None, "attempt-running", "running", job.attempts))
        elif job.status == "done" and job.finished_at is not None:
            runs.append((job.locked_at, job.finished_at, "attempt-done", "done", job.attempts))
    runs.sort(key=lambda r: (r[0], r[4]))
    waited_from, after = job.created_at, ""
    for start, end, kind, outcome, number in runs:
        gap_kind, gap_label = _GAP_AFTER.get(after, ("retry-wait", "waited to retry"))
        if not after and earlier:
            gap_kind, gap_label = "retry-wait", f"{earlier} earlier attempts (not drawn)"
        elif not after:
            gap_kind, gap_label = "queued", "waited to start"
        if start > waited_from:
            spans.append(Span(waited_from, start, gap_kind, gap_label))
        worker = f"on {clean(_worker_of(job, number, attempts), TITLE_CHARS)}"
        if end is None:
            spans.append(Span(start, now, kind, f"attempt {number}: running", worker, True))
        else:
            spans.append(Span(start, end, kind, f"attempt {number}: {outcome}", worker))
        waited_from, after = end or now, outcome
    if job.status in ("ready", "blocked", "waiting") and now > waited_from:
        spans.append(_waiting_now(job, waited_from, after, now))
    for step in steps:
        spans.extend(_step_span(step, now))
    for event in events:
        spans.append(
            Span(
                event.at,
                None,
                "operator",
                f"{clean(event.verb, 20)} by {clean(event.actor, 24)}",
            )
        )
    if job.finished_at is not None and job.status in ("done", "failed", "cancelled", "expired"):
        spans.append(Span(job.finished_at, None, f"finished-{job.status}", job.status))
    return sorted((s for s in spans if s.start is not None), key=lambda s: s.start)


def _worker_of(job: Job, number: int, attempts: Sequence[AttemptRow]) -> str:
    for a in attempts:
        if a.attempt == number:
            return a.worker_id or "-"
    return job.locked_by or "-"


def _waiting_now(job: Job, since: datetime, after: str, now: datetime) -> Span:
    """What the job waits for now (it is ready, blocked or waiting)."""
    due = f"due {display.absolute(job.run_after)}" if job.run_after else ""
    if job.status == "blocked":
        held = display.held_by(job.blocked_by, job.concurrency_key, job.rate_key)
        return Span(since, now, "blocked", "blocked", clean(held, TITLE_CHARS), True)
    if job.status == "waiting" and job.waiting_for:
        return Span(
            since, now, "dependencies", f"waiting for {job.waiting_for} dependencies", "", True
        )
    if job.status == "waiting":
        return Span(since, now, "parked", "parked: a durable sleep or wait", due, True)
    if job.run_after is not None and job.run_after > now:
        kind, label = _GAP_AFTER.get(after, ("retry-wait" if after else "scheduled", ""))
        label = label or ("waiting to retry" if after else "scheduled")
        return Span(since, now, kind, label, due, True)
    return Span(since, now, "queued", "ready: waiting for a worker", due, True)


def _step_span(step: StepRow, now: datetime) -> list[Span]:
    if step.started_at is None:
        return []
    name = clean(step.name, 24)
    kind = step.kind if step.kind in ("step", "sleep", "signal", "child") else "step"
    what = kind
    note = ""
    if step.wake_at is not None and kind in ("sleep", "signal"):
        verb = "wakes" if kind == "sleep" else "times out"
        note = f"{verb} {display.absolute(step.wake_at)}"
    if step.finished_at is not None:
        return [Span(step.started_at, step.finished_at, kind, f"{what} {name}", note)]
    if kind == "step":  # a step is recorded once it returned; an unfinished one is a wait
        return [Span(step.started_at, now, kind, f"{what} {name}", note, True)]
    return [Span(step.started_at, now, kind, f"{what} {name}: waiting", note, True)]


_TICKS = [
    1,
    2,
    5,
    10,
    15,
    30,
    60,
    120,
    300,
    600,
    900,
    1800,
    3600,
    7200,
    3 * 3600,
    6 * 3600,
    12 * 3600,
    86400,
    2 * 86400,
    7 * 86400,
    30 * 86400,
    365 * 86400,
]


def _bounded(value: datetime) -> datetime:
    """Inside Python's calendar, whatever a row written behind our back says."""
    edge = timedelta(days=2)
    return min(max(value, CALENDAR_START + edge), CALENDAR_END - edge)


def timeline_svg(spans: Sequence[Span], now: datetime, time_zone: str = "") -> SafeString:
    """A Gantt-like picture of ``spans`` (from :func:`job_spans`): one row each, its label
    on the left, its bar (or mark, a diamond) on a common time axis, its exact times in its
    tooltip. At most ``MAX_ROWS`` rows: the latest; a note says how many earlier ones it
    leaves out."""
    shown = list(spans)[-MAX_ROWS:]
    left_out = len(spans) - len(shown)
    width, label_w, row_h, top, axis_h = 760, 230, 18, 6 + (14 if left_out else 0), 20
    plot_w = width - label_w - 70  # room for a duration after the last bar
    if not shown:
        return mark_safe("")
    t0 = min(_bounded(s.start) for s in shown)
    t1 = max(max(_bounded(s.end or s.start), _bounded(s.start)) for s in shown)
    t1 = max(t1, t0 + timedelta(seconds=1))
    total = (t1 - t0).total_seconds()

    def x(at: datetime) -> float:
        seconds = (_bounded(at) - t0).total_seconds()
        return label_w + plot_w * min(max(seconds / total, 0.0), 1.0)

    rows = []
    for n, span in enumerate(shown):
        y = top + n * row_h
        colour = KIND_COLOURS.get(span.kind, UNKNOWN_COLOUR)
        start_text = display.absolute(span.start)
        label = clean(span.label, TITLE_CHARS)
        if span.end is None:
            tooltip = f"{label}: {start_text}"
        else:
            end_text = "now (still going)" if span.ongoing else display.absolute(span.end)
            took = _span_duration(max((span.end - span.start).total_seconds(), 0.0))
            tooltip = f"{label}: {start_text} → {end_text} ({took})"
        if span.note:
            tooltip += f"; {clean(span.note, TITLE_CHARS)}"
        x0 = x(span.start)
        if span.end is None:
            cx, cy = x0, y + row_h / 2
            shape = format_html(
                '<path d="M{} {}l5 5l-5 5l-5 -5z" fill="{}"/>',
                f"{cx:.1f}",
                f"{cy - 5:.1f}",
                colour,
            )
            after = ""
        else:
            x1 = max(x(span.end), x0 + 2)
            shape = format_html(
                '<rect x="{}" y="{}" width="{}" height="{}" rx="2" fill="{}"{}/>',
                f"{x0:.1f}",
                y + 3,
                f"{x1 - x0:.1f}",
                row_h - 6,
                colour,
                mark_safe(' fill-opacity="0.75"') if span.ongoing else "",
            )
            after = format_html(
                '<text x="{}" y="{}" font-size="10" style="{}">{}{}</text>',
                f"{x1 + 4:.1f}",
                y + row_h - 5,
                _TEXT,
                _span_duration(max((span.end - span.start).total_seconds(), 0.0)),
                "…" if span.ongoing else "",
            )
        rows.append(
            format_html(
                '<g class="pqjobs-span pqjobs-span-{}"><title>{}</title>'
                '<line x1="{}" x2="{}" y1="{}" y2="{}" style="{}"/>'
                '<text x="4" y="{}" font-size="11" style="{}">{}</text>{}{}</g>',
                span.kind,
                tooltip,
                label_w,
                width,
                y + row_h - 0.5,
                y + row_h - 0.5,
                _GRID,
                y + row_h - 5,
                _STRONG_TEXT if span.kind.startswith("attempt") else _TEXT,
                clean(span.label),
                shape,
                after,
            )
        )
    plot_bottom = top + len(shown) * row_h
    height = plot_bottom + axis_h
    ticks = format_html_join(
        "",
        '<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" style="' + _GRID + '"/>'
        '<text x="{0}" y="{3}" text-anchor="{4}">{5}</text>',
        _axis_ticks(t0, t1, label_w, plot_w, top, plot_bottom, height),
    )
    earlier = (
        format_html(
            '<text x="4" y="12" font-size="10" style="{}">{} earlier not shown</text>',
            _TEXT,
            left_out,
        )
        if left_out
        else ""
    )
    now_x = x(now) if t0 <= now <= t1 else None
    now_line = (
        format_html(
            '<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" stroke="#c53030" stroke-dasharray="3 2">'
            "<title>now: {3}</title></line>",
            f"{now_x:.1f}",
            top,
            plot_bottom,
            display.absolute(now),
        )
        if now_x is not None
        else ""
    )
    zone = f", times in {clean(time_zone, 40)}" if time_zone else ""
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" '
        'style="max-width:100%;height:auto" class="pqjobs-chart pqjobs-job-timeline" '
        'role="img" aria-label="{}">'
        '<rect width="100%" height="100%" style="{}"/>{}'
        '<g class="pqjobs-chart-axis" font-size="10" style="{}">'
        '<line x1="{}" x2="{}" y1="{}" y2="{}" style="{}"/>{}</g>{}{}</svg>',
        width,
        height,
        width,
        height,
        f"the job's timeline: {len(shown)} events{zone}",
        _BACKGROUND,
        earlier,
        _TEXT,
        label_w,
        width,
        plot_bottom,
        plot_bottom,
        _LINE,
        ticks,
        format_html_join("", "{}", ((r,) for r in rows)),  # over the axis' grid lines
        now_line,
    )


def _span_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    if seconds < 3 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


def _axis_ticks(
    t0: datetime, t1: datetime, left: float, plot_w: float, top: float, bottom: float, height: int
) -> list[tuple[str, float, float, int, str, str]]:
    total = (t1 - t0).total_seconds()
    step = next((s for s in _TICKS if total / s <= 6), _TICKS[-1])
    local0 = timezone.localtime(t0) if timezone.is_aware(t0) else t0
    # the first tick: t0 rounded up to the step in the local wall clock
    wall = (local0.replace(tzinfo=None) - datetime(1970, 1, 1)).total_seconds()
    first = math.ceil(wall / step) * step - wall
    fmt = "%H:%M:%S" if step < 60 else "%H:%M" if step < 86400 else "%m-%d"
    if step < 86400 and total > 86400:
        fmt = "%m-%d %H:%M"
    ticks: list[tuple[str, float, float, int, str, str]] = []
    at = first
    while at <= total and len(ticks) < 10:
        px = left + plot_w * at / total
        moment = t0 + timedelta(seconds=at)
        local = timezone.localtime(moment) if timezone.is_aware(moment) else moment
        anchor = "start" if px < left + 20 else "middle"
        ticks.append((f"{px:.1f}", top, bottom + 3, height - 5, anchor, local.strftime(fmt)))
        at += step
    return ticks


# --- graphs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    """A node of a graph: a job (``status`` its status, None when its row is gone), a
    batch (``kind`` "batch"), or the jobs left out (``kind`` "more", ``count`` of them)."""

    key: str
    label: str
    sub: str = ""
    url: str = ""
    status: str | None = None
    kind: str = "job"  # job, batch, more
    focus: bool = False
    count: int = 0


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    kind: str  # "depends", "member", "child", "callback", "more"
    title: str = ""


@dataclass
class Graph:
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    label: str = "jobs"

    _keys: set[str] = field(default_factory=set, repr=False)
    _links: set[tuple[str, str]] = field(default_factory=set, repr=False)

    def add(self, node: Node) -> None:
        """Add ``node`` unless a node of its key is there."""
        if node.key not in self._keys:
            self._keys.add(node.key)
            self.nodes.append(node)

    def link(self, source: str, target: str, kind: str, title: str = "") -> None:
        """Add an edge from ``source`` to ``target`` (keys) unless they have one."""
        if (source, target) not in self._links and source != target:
            self._links.add((source, target))
            self.edges.append(Edge(source, target, kind, title))


def job_node(
    pk: int, status: str | None, job_type: str = "", focus: bool = False, what: str = ""
) -> Node:
    """A job's node: ``#12 failed`` over its type, a link to its page."""
    label = f"#{pk} {status or '(gone)'}"
    sub = clean(job_type, 22, keep_end=True) if job_type else what
    return Node(f"job:{pk}", label, sub, composition.job_url(pk), status, "job", focus)


def more_node(key: str, count: int, url: str, capped: bool = False) -> Node:
    """The jobs left out: ``+9,950 more``, a link to them in the job list."""
    text = f"+{count:,}{'+' if capped else ''} more"
    return Node(f"more:{key}", text, "in the job list", url, None, "more", count=count)


_EDGE_COLOURS = {
    "depends": "#4a5568",
    "child": "#3182ce",
    "member": "#a0aec0",
    "callback": "#805ad5",
    "more": "#a0aec0",
}


def graph_svg(graph: Graph, max_nodes: int = MAX_NODES) -> SafeString:
    """The graph, left to right: each node in a column after the nodes with edges to it
    (a longest-path layering), a column of many wrapped into sub-columns. Nodes are
    coloured by status and link to their pages; edges are arrows. At most ``max_nodes``
    jobs (besides batches and "more" nodes): those past it are counted in the caption."""
    jobs = [n for n in graph.nodes if n.kind == "job"]
    kept = {n.key for n in jobs[:max_nodes]}
    dropped = len(jobs) - len(kept)
    nodes = [n for n in graph.nodes if n.kind != "job" or n.key in kept]
    keys = {n.key for n in nodes}
    edges = [e for e in graph.edges if e.source in keys and e.target in keys]
    if not nodes:
        return mark_safe("")
    layer = {n.key: 0 for n in nodes}
    for _ in range(len(nodes)):  # longest path; a cycle stops after len(nodes) rounds
        moved = False
        for e in edges:
            if layer[e.target] < layer[e.source] + 1 <= len(nodes):
                layer[e.target] = layer[e.source] + 1
                moved = True
        if not moved:
            break
    columns: dict[int, list[Node]] = {}
    for n in nodes:
        columns.setdefault(layer[n.key], []).append(n)
    node_w, node_h, gap_x, gap_y, pad, per_column = 150, 32, 44, 10, 10, 10
    place: dict[str, tuple[float, float]] = {}
    # a column wrapped into sub-columns: its left edge, top and bottom (edges from one
    # node to many of its nodes are drawn as one arrow to a bracket beside it)
    wrapped: dict[int, tuple[float, float, float]] = {}
    x = pad
    tallest = 0
    for number in sorted(columns):
        column = columns[number]
        rows = min(len(column), per_column)
        tallest = max(tallest, rows)
        for i, n in enumerate(column):
            sub_column, row = divmod(i, per_column)
            place[n.key] = (x + sub_column * (node_w + 12), pad + row * (node_h + gap_y))
        if len(column) > per_column:
            wrapped[number] = (x, pad, pad + rows * (node_h + gap_y) - gap_y)
        x += math.ceil(len(column) / per_column) * (node_w + 12) - 12 + gap_x
    width = int(x - gap_x + pad)
    height = int(pad * 2 + tallest * (node_h + gap_y) - gap_y) + (16 if dropped else 0)
    lines = []
    buses: dict[tuple[str, int], list[Edge]] = {}
    for e in edges:
        if layer[e.target] in wrapped and e.kind in ("member", "callback", "more", "child"):
            buses.setdefault((e.source, layer[e.target]), []).append(e)
    for (source, number), bus in buses.items():
        if len(bus) < 2:
            continue
        sx, sy = place[source]
        left, top, bottom = wrapped[number]
        x1, y1, x2, y2 = sx + node_w, sy + node_h / 2, left - 8, (top + bottom) / 2
        bend = max((x2 - x1) / 2, 10)
        lines.append(
            (
                # the bracket, then the arrow to it (the path's end takes the arrowhead)
                f"M{x2 + 4:.1f} {top:.1f}L{x2:.1f} {top:.1f}L{x2:.1f} {bottom:.1f}"
                f"L{x2 + 4:.1f} {bottom:.1f}M{x1:.1f} {y1:.1f}C{x1 + bend:.1f} {y1:.1f} "
                f"{x2 - bend:.1f} {y2:.1f} {x2:.1f} {y2:.1f}",
                _EDGE_COLOURS.get(bus[0].kind, "#4a5568"),
                bus[0].kind,
                clean(f"{bus[0].title or bus[0].kind}: {len(bus)} drawn", TITLE_CHARS),
            )
        )
        edges = [e for e in edges if e not in bus]
    for e in edges:
        sx, sy = place[e.source]
        tx, ty = place[e.target]
        x1, y1, x2, y2 = sx + node_w, sy + node_h / 2, tx, ty + node_h / 2
        bend = max((x2 - x1) / 2, 10)
        lines.append(
            (
                f"M{x1:.1f} {y1:.1f}C{x1 + bend:.1f} {y1:.1f} {x2 - bend:.1f} {y2:.1f} "
                f"{x2:.1f} {y2:.1f}",
                _EDGE_COLOURS.get(e.kind, "#4a5568"),
                e.kind,
                clean(e.title or e.kind, TITLE_CHARS),
            )
        )
    boxes = [_node_box(n, *place[n.key], node_w, node_h) for n in nodes]
    caption = (
        format_html(
            '<text x="{}" y="{}" font-size="11" style="{}">and {} more not drawn</text>',
            pad,
            height - 4,
            _TEXT,
            f"{dropped:,}",
        )
        if dropped
        else ""
    )
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" '
        'style="max-width:100%;height:auto" class="pqjobs-chart pqjobs-graph" '
        'role="group" aria-label="{}">'
        '<defs><marker id="pqjobs-arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="6" markerHeight="6" orient="auto-start-reverse">'
        '<path d="M0 0L10 5L0 10z" fill="#718096"/></marker></defs>'
        '<rect width="100%" height="100%" style="{}"/>{}{}{}</svg>',
        width,
        height,
        width,
        height,
        clean(graph.label, TITLE_CHARS),
        _BACKGROUND,
        format_html_join(
            "",
            '<path d="{}" fill="none" stroke="{}" stroke-width="1.5" '
            'marker-end="url(#pqjobs-arrow)" class="pqjobs-edge pqjobs-edge-{}">'
            "<title>{}</title></path>",
            lines,
        ),
        format_html_join("", "{}", ((b,) for b in boxes)),
        caption,
    )


def _node_box(node: Node, x: float, y: float, w: int, h: int) -> SafeString:
    if node.kind == "more":
        fill, text_style = "#fff", _STRONG_TEXT  # (filled: the whole box takes the click)
        outline = "fill: var(--body-bg, #fff);stroke-dasharray:4 3;" + _LINE
    elif node.kind == "batch":
        fill, text_style, outline = BATCH_COLOUR, "fill:#fff", "stroke:none"
    else:
        fill = (
            display.STATUS_COLOURS.get(node.status, UNKNOWN_COLOUR) if node.status else GONE_COLOUR
        )
        text_style = "fill:#fff"
        outline = "stroke: var(--body-fg, #333);stroke-width:3" if node.focus else "stroke:none"
    title = f"{node.label} {node.sub}".strip()
    if node.kind == "job":
        title = f"job {title}{' (this job)' if node.focus else ''}"
    body = format_html(
        '<title>{}</title><rect x="{}" y="{}" width="{}" height="{}" rx="6" fill="{}" '
        'style="{}"/><text x="{}" y="{}" font-size="11" font-weight="bold" style="{}">{}</text>'
        '<text x="{}" y="{}" font-size="10" style="{}">{}</text>',
        clean(title, TITLE_CHARS),
        f"{x:.1f}",
        f"{y:.1f}",
        w,
        h,
        fill,
        outline,
        f"{x + 7:.1f}",
        f"{y + 13:.1f}",
        text_style,
        clean(node.label, 24),
        f"{x + 7:.1f}",
        f"{y + 26:.1f}",
        text_style,
        clean(node.sub, 26),
    )
    classes = f"pqjobs-node pqjobs-node-{node.kind}"
    status = node.status or ""
    if node.url:
        return format_html(
            '<a href="{}" class="{}" data-status="{}" data-key="{}">{}</a>',
            node.url,
            classes,
            status,
            node.key,
            body,
        )
    return format_html(
        '<g class="{}" data-status="{}" data-key="{}">{}</g>', classes, status, node.key, body
    )


# --- the dashboard's active jobs -------------------------------------------------------------

ACTIVE_STATUSES = ("running", "ready", "blocked", "waiting")


def active_svg(active: Sequence[dict[str, Any]], list_url: str) -> SafeString:
    """The dashboard's active jobs: a bar per queue (the busiest first, at most
    ``MAX_QUEUES``), running, ready, blocked and waiting jobs in their statuses' colours,
    each part a link to those jobs in the job list (``list_url``)."""
    by_queue: dict[str, dict[str, int]] = {}
    for row in active:
        by_queue.setdefault(str(row["queue"]), {})[str(row["status"])] = int(row["count"])
    if not by_queue:
        return mark_safe("")
    queues = sorted(by_queue.items(), key=lambda q: (-sum(q[1].values()), q[0]))
    shown, left_out = queues[:MAX_QUEUES], len(queues) - MAX_QUEUES
    width, label_w, row_h = 760, 170, 20
    peak = max(sum(c.values()) for _, c in shown)
    plot_w = width - label_w - 60
    rows = []
    for n, (queue, counts) in enumerate(shown):
        y = 4 + n * row_h
        x = float(label_w)
        parts = []
        for status in ACTIVE_STATUSES:
            count = counts.get(status, 0)
            if not count:
                continue
            w = max(plot_w * count / peak, 2)
            # (a queue name no real queue has, too long or not Unicode, is still quoted)
            query = urlencode(
                {"queue": queue[:TITLE_CHARS], "status__exact": status}, errors="surrogatepass"
            )
            parts.append(
                format_html(
                    '<a href="{}?{}" class="pqjobs-active-part" data-status="{}">'
                    "<title>queue {}: {} {}</title>"
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/></a>',
                    list_url,
                    query,
                    status,
                    clean(queue, TITLE_CHARS),
                    f"{count:,}",
                    status,
                    f"{x:.1f}",
                    y + 3,
                    f"{w:.1f}",
                    row_h - 6,
                    display.STATUS_COLOURS[status],
                )
            )
            x += w
        rows.append(
            format_html(
                '<g class="pqjobs-queue"><text x="4" y="{}" font-size="11" style="{}">{}</text>'
                '{}<text x="{}" y="{}" font-size="10" style="{}">{}</text></g>',
                y + row_h - 6,
                _STRONG_TEXT,
                clean(queue, 26),
                format_html_join("", "{}", ((p,) for p in parts)),
                f"{x + 4:.1f}",
                y + row_h - 6,
                _TEXT,
                f"{sum(counts.values()):,}",
            )
        )
    height = 8 + len(shown) * row_h + (16 if left_out > 0 else 0)
    more = (
        format_html(
            '<text x="4" y="{}" font-size="10" style="{}">and {} more queues</text>',
            height - 4,
            _TEXT,
            left_out,
        )
        if left_out > 0
        else ""
    )
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" '
        'style="max-width:100%;height:auto" class="pqjobs-chart pqjobs-active" role="group" '
        'aria-label="active jobs by queue">'
        '<rect width="100%" height="100%" style="{}"/>{}{}</svg>',
        width,
        height,
        width,
        height,
        _BACKGROUND,
        format_html_join("", "{}", ((r,) for r in rows)),
        more,
    )


# --- what the pages read for them ------------------------------------------------------------

_STEP_ROWS = QUERIES["step_rows"]
# The first children of a job (through the partial index on parent_id; enqueued after their
# parent, so only ids above it are looked at) and the jobs of the given ids (its parent, its
# dependencies and dependents), each with its status and type.
_AROUND = """
(SELECT 'child', id, status, job_type FROM pqjobs_job
 WHERE parent_id = %(id)s AND id > %(id)s ORDER BY id LIMIT %(limit)s)
UNION ALL
(SELECT 'near', id, status, job_type FROM pqjobs_job WHERE id = ANY(%(ids)s))
"""
# A batch's first members (through the partial index on batch_id), each with the first of
# its dependencies (to draw those among the members).
_MEMBERS = QUERIES["members"]
# The child jobs a workflow's steps enqueued, by step name (the id only of the step's result).
_CHILD_STEPS = QUERIES["child_steps"]


def _rows(alias: str, sql: str, params: Any) -> list[tuple[Any, ...]]:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def job_pictures(job: Job, alias: str, now: datetime | None = None) -> dict[str, Any]:
    """The job page's pictures, for its template: ``pqjobs_timeline`` and (when the job
    has a batch, a parent, children, dependencies or dependents) ``pqjobs_graph``. Reads
    the job's steps (no result) and the types of the jobs around it; the attempts, the
    operator actions and the links are the page's (``excerpts``, ``composition``)."""
    now = now or timezone.now()
    page = excerpts.page_of(job)
    attempts = [
        AttemptRow(a.attempt, a.outcome, a.started_at, a.finished_at, a.worker_id)
        for a in page.attempts
    ]
    steps = (
        [StepRow(*row) for row in _rows(alias, _STEP_ROWS, [job.pk, SHOWN_STEPS])]
        if page.has_steps
        else []
    )
    spans = job_spans(job, attempts, steps, page.events, now, page.attempts_not_shown)
    zone = timezone.localtime(now).strftime("%Z")
    return {
        "pqjobs_timeline": timeline_svg(spans, now, zone),
        "pqjobs_graph": job_graph_svg(job, alias, page.has_steps),
    }


def job_graph_svg(job: Job, alias: str, has_steps: bool) -> SafeString:
    """The jobs around ``job``: its batch, its parent, its dependencies, itself, its
    dependents and its children (a workflow's child jobs, by step name)."""
    links = composition.links_of(job)
    graph = Graph(label=f"jobs linked to job {job.pk}")
    me = f"job:{job.pk}"
    around = [j.id for j in links.dependencies.jobs + links.dependents.jobs]
    if job.parent_id:
        around.append(job.parent_id)
    children: list[tuple[int, str, str]] = []
    types: dict[int, tuple[str, str]] = {}
    for side, pk, status, job_type in _rows(
        alias, _AROUND, {"id": job.pk, "limit": MAX_NODES // 3, "ids": around}
    ):
        if side == "child":
            children.append((pk, status, job_type))
        types[pk] = (status, job_type)
    if links.batch is not None:
        ref = links.batch
        graph.add(
            Node(
                f"batch:{ref.id}",
                f"batch #{ref.id}",
                ref.label,
                composition.batch_url(ref.id),
                kind="batch",
            )
        )
        graph.link(f"batch:{ref.id}", me, "member", f"member of batch {ref.id}")
    if links.callback_of is not None:
        ref = links.callback_of
        graph.add(
            Node(
                f"batch:{ref.id}",
                f"batch #{ref.id}",
                ref.label,
                composition.batch_url(ref.id),
                kind="batch",
            )
        )
        graph.link(f"batch:{ref.id}", me, "callback", f"callback of batch {ref.id}")
    if job.parent_id:
        status, job_type = types.get(job.parent_id, (None, ""))
        graph.add(job_node(job.parent_id, status, job_type, what="parent"))
        graph.link(f"job:{job.parent_id}", me, "child", "parent of this job")
    for linked in links.dependencies.jobs:
        status, job_type = types.get(linked.id, (linked.status, ""))
        graph.add(job_node(linked.id, status, job_type))
        graph.link(f"job:{linked.id}", me, "depends", "this job depends on it")
    if links.dependencies.more > 0:
        url = composition.job_list_url(dependencies_of=job.pk)
        graph.add(
            more_node("dependencies", links.dependencies.more, url, links.dependencies.capped)
        )
        graph.link("more:dependencies", me, "more")
    graph.add(job_node(job.pk, job.status, job.job_type, focus=True))
    for linked in links.dependents.jobs:
        status, job_type = types.get(linked.id, (linked.status, ""))
        graph.add(job_node(linked.id, status, job_type))
        graph.link(me, f"job:{linked.id}", "depends", "depends on this job")
    if links.dependents.more > 0:
        url = composition.job_list_url(dependents_of=job.pk)
        graph.add(more_node("dependents", links.dependents.more, url, links.dependents.capped))
        graph.link(me, "more:dependents", "more")
    step_of = (
        {pk: name for name, pk in _rows(alias, _CHILD_STEPS, [job.pk, SHOWN_STEPS]) if pk}
        if has_steps and children
        else {}
    )
    for pk, status, job_type in children:
        graph.add(job_node(pk, status, job_type))
        step = step_of.get(pk)
        graph.link(me, f"job:{pk}", "child", f"child step {step}" if step else "child job")
    if len(graph.nodes) == 1:
        return mark_safe("")
    return graph_svg(graph)


def batch_pictures(
    batch_id: int,
    label: str,
    alias: str,
    present: int,
    callbacks: composition.Linked,
) -> dict[str, Any]:
    """The batch page's graph (``pqjobs_graph``): the batch, its first ``MAX_NODES``
    members (by id) and the dependencies among them (one query), the callback jobs its
    finishes enqueued (``callbacks``, as the page read them), and a node counting the
    members not drawn (``present``: the members in the job table, as the page counted
    them), a link to them all in the job list."""
    members = _rows(alias, _MEMBERS, [batch_id, MAX_NODES])
    graph = Graph(label=f"batch {batch_id} and its members")
    me = f"batch:{batch_id}"
    all_url = composition.job_list_url(batch__id__exact=batch_id)
    graph.add(Node(me, f"batch #{batch_id}", label, composition.batch_url(batch_id), kind="batch"))
    for pk, status, job_type, _ in members:
        graph.add(job_node(pk, status, job_type))
        graph.link(me, f"job:{pk}", "member", f"member of batch {batch_id}")
    for pk, _, _, depends_on in members:
        for other in depends_on or ():
            graph.link(f"job:{other}", f"job:{pk}", "depends", "depends on")
    more = max(present - len(members), 0)
    if more:
        graph.add(more_node("members", more, all_url))
        graph.link(me, "more:members", "more")
    for linked in callbacks.jobs[:6]:
        graph.add(job_node(linked.id, linked.status, linked.job_type))
        graph.link(me, f"job:{linked.id}", "callback", "a callback of the batch")
    return {
        "pqjobs_graph": graph_svg(graph),
        "pqjobs_graph_more": more,
        "pqjobs_graph_more_url": all_url,
    }


def dashboard_pictures(active: Sequence[dict[str, Any]], list_url: str) -> dict[str, Any]:
    """The dashboard's picture of its active jobs (no query: the dashboard read them)."""
    return {"pqjobs_active": active_svg(active, list_url)}
