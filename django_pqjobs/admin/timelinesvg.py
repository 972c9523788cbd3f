"""A job's timeline, drawn as SVG: :func:`job_spans` turns a job, its attempts, its
workflow steps and the operators' actions into rows (its waits, attempts, sleeps, snoozes,
parks, steps and actions on one time axis), and :func:`timeline_svg` draws them (pure:
no database). The job page's gathering: ``pictures.job_pictures``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..models import CALENDAR_END, CALENDAR_START, Job
from . import display, svg

MAX_ROWS = 40  # of a timeline

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

# Attempt outcomes (``FailureKind``) that gave the attempt back rather than failing it.
_GIVEN_BACK = {"released": "attempt-given-back", "snoozed": "snoozed", "parked": "parked"}
# After an attempt with this outcome, the job waited for...
_GAP_AFTER = {
    "snoozed": ("snoozed", "snoozed"),
    "parked": ("parked", "parked"),
    "released": ("queued", "waited for a worker"),
}


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
        worker = f"on {svg.clean(_worker_of(job, number, attempts), svg.TITLE_CHARS)}"
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
                f"{svg.clean(event.verb, 20)} by {svg.clean(event.actor, 24)}",
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
        return Span(since, now, "blocked", "blocked", svg.clean(held, svg.TITLE_CHARS), True)
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
    name = svg.clean(step.name, 24)
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
        colour = KIND_COLOURS.get(span.kind, svg.UNKNOWN_COLOUR)
        start_text = display.absolute(span.start)
        label = svg.clean(span.label, svg.TITLE_CHARS)
        if span.end is None:
            tooltip = f"{label}: {start_text}"
        else:
            end_text = "now (still going)" if span.ongoing else display.absolute(span.end)
            took = _span_duration(max((span.end - span.start).total_seconds(), 0.0))
            tooltip = f"{label}: {start_text} → {end_text} ({took})"
        if span.note:
            tooltip += f"; {svg.clean(span.note, svg.TITLE_CHARS)}"
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
                svg.TEXT,
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
                svg.GRID,
                y + row_h - 5,
                svg.STRONG_TEXT if span.kind.startswith("attempt") else svg.TEXT,
                svg.clean(span.label),
                shape,
                after,
            )
        )
    plot_bottom = top + len(shown) * row_h
    height = plot_bottom + axis_h
    ticks = format_html_join(
        "",
        '<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" style="' + svg.GRID + '"/>'
        '<text x="{0}" y="{3}" text-anchor="{4}">{5}</text>',
        _axis_ticks(t0, t1, label_w, plot_w, top, plot_bottom, height),
    )
    earlier = (
        format_html(
            '<text x="4" y="12" font-size="10" style="{}">{} earlier not shown</text>',
            svg.TEXT,
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
    zone = f", times in {svg.clean(time_zone, 40)}" if time_zone else ""
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
        svg.BACKGROUND,
        earlier,
        svg.TEXT,
        label_w,
        width,
        plot_bottom,
        plot_bottom,
        svg.LINE,
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
