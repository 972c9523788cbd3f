"""The dashboard's numbers (a handful of indexed queries) and its server-drawn SVG chart."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.db import connections
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import monitoring
from ..clock import database_now
from ..conf import conf
from ..registry import registry
from ..sql import queries
from ..statuses import FINISHED_STATUSES
from .display import moment

QUERIES = queries("admin_dashboard")

_PER_MINUTE = QUERIES["per_minute"]
# Failed attempts after which the job went on (a retry), per minute. The attempt that ended
# a failed or cancelled job is that job's failure, counted above, not a retry; an attempt
# given back (released, snoozed, parked) was no failure.
_RETRIES_PER_MINUTE = QUERIES["retries_per_minute"]
# One range scan of the finished-jobs index serves both the per-type table and the totals:
# its cost grows with the jobs finished in the last 24 h (docs/benchmarks.md has figures).
_LAST_DAY = QUERIES["last_day"]
# One arm per status, so each is served by its partial index (waiting / claim / blocked /
# running) however many finished rows the table holds; "status IN (...)" would read the
# whole table. The last column counts the ready jobs with a fair key (a fair-shared queue).
_ACTIVE = QUERIES["active"]
# Through the partial index on running jobs.
_RUNNING_BY_WORKER = QUERIES["running_by_worker"]


FAILING_SHOWN = 8  # job types in the dashboard's "Failures" at its top


@dataclass
class Dashboard:
    now: datetime
    active: list[dict[str, Any]]
    finished_24h: dict[str, int]
    oldest_ready: datetime | None
    per_minute: list[tuple[datetime, int, int, int]]
    by_type: list[dict[str, Any]]
    workers: list[dict[str, Any]]
    groups: list[dict[str, Any]] = field(default_factory=list)  # run_jobs --processes
    read_from: str = "default"  # the alias it was read from
    read_lag: float | None = None  # seconds behind the primary, when that is a replica
    # (queue, "priority aging: +1 every 1 m, up to 10"), from PQJOBS["PRIORITY_AGING"]
    aging: list[tuple[str, str]] = field(default_factory=list)
    # the fair-shared queues: {"queue", "ready_with_key", "declared_by"}, by queue
    fair: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failing(self) -> list[dict[str, Any]]:
        """The job types with failed jobs in the last 24 h, the most failures first."""
        return [row for row in self.by_type if row["failed"]][:FAILING_SHOWN]

    @property
    def stale_workers(self) -> list[dict[str, Any]]:
        """The workers not live (their heartbeat too old), by the rule jobs_health uses."""
        return [w for w in self.workers if not w["live"]]

    @property
    def lag_seconds(self) -> float | None:
        if self.oldest_ready is None:
            return None
        return max(0.0, (self.now - self.oldest_ready).total_seconds())

    @property
    def chart(self) -> SafeString:
        return throughput_svg(self.per_minute)

    @property
    def time_zone(self) -> str:
        """The name of the time zone the chart's axis is in (the admin's)."""
        return timezone.localtime(self.now).strftime("%Z")

    @property
    def chart_totals(self) -> tuple[int, int, int]:
        """Done, failed and retried in the chart's hour."""
        return (
            sum(m[1] for m in self.per_minute),
            sum(m[2] for m in self.per_minute),
            sum(m[3] for m in self.per_minute),
        )


def _rows(alias: str, sql: str, params: list[Any] | None = None) -> list[tuple[Any, ...]]:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params or [])
        return list(cursor.fetchall())


def collect(alias: str, paused_queues: frozenset[str] = frozenset()) -> Dashboard:
    """The dashboard's numbers, read from ``alias``; ``paused_queues`` are marked in the
    active jobs."""
    now = database_now(alias)
    rows = _rows(alias, _ACTIVE)
    fair = fair_shared({q: keyed for s, q, _, _, keyed in rows if s == "ready" and keyed})
    fair_queues = {f["queue"] for f in fair}
    active = [
        {
            "status": s,
            "queue": q,
            "count": n,
            "oldest_due": oldest,
            "oldest_due_shown": moment(oldest),
            "paused": q in paused_queues,
            "fair": q in fair_queues,
        }
        for s, q, n, oldest, _ in rows
    ]
    due = [a["oldest_due"] for a in active if a["oldest_due"] is not None]
    counts = {minute: [done, failed, 0] for minute, done, failed in _rows(alias, _PER_MINUTE)}
    for minute, retried in _rows(alias, _RETRIES_PER_MINUTE):
        counts.setdefault(minute, [0, 0, 0])[2] = retried
    start = now.replace(second=0, microsecond=0) - timedelta(minutes=59)
    per_minute = []
    for n in range(60):
        minute = start + timedelta(minutes=n)
        done, failed, retried = counts.get(minute, (0, 0, 0))
        per_minute.append((minute, done, failed, retried))
    finished_24h: dict[str, int] = {}
    per_type: dict[str, dict[str, int]] = {}
    for job_type, status, count in _rows(alias, _LAST_DAY):
        finished_24h[status] = finished_24h.get(status, 0) + count
        per_type.setdefault(job_type, dict.fromkeys(map(str, FINISHED_STATUSES), 0))[status] = count
    by_type: list[dict[str, Any]] = [
        {
            "job_type": job_type,
            **counts,
            "failure_percent": 100 * counts["failed"] / ((counts["done"] + counts["failed"]) or 1),
        }
        for job_type, counts in sorted(per_type.items(), key=lambda i: (-i[1]["failed"], i[0]))
    ]
    running = dict(_rows(alias, _RUNNING_BY_WORKER))
    # Live ones first; a stale one is judged by the rule jobs_health uses.
    workers = sorted(
        (
            {
                "worker_id": w.worker_id,
                "hostname": w.hostname,
                "pid": w.pid,
                "concurrency": w.concurrency,
                "queues": ", ".join(w.queues or ()) or "all",
                "heartbeat_shown": _age(w.heartbeat_at, w.heartbeat_age),
                "live": monitoring.is_live(w),
                "running": running.get(w.worker_id, 0),
            }
            for w in monitoring.workers(alias)
        ),
        key=lambda w: not w["live"],
    )
    return Dashboard(
        now,
        active,
        finished_24h,
        min(due, default=None),
        per_minute,
        by_type[:50],
        workers,
        groups=_groups(workers),
        read_from=alias,
        read_lag=monitoring.read_lag(alias),
        aging=aging_rows(),
        fair=fair,
    )


def aging_rows() -> list[tuple[str, str]]:
    """Each aging queue and what aging does in it, by queue name (none while the setting is
    invalid: its system check says why)."""
    try:
        aging = conf.PRIORITY_AGING
    except ValueError:
        return []
    return [(queue, f"priority aging: {rule}") for queue, rule in sorted(aging.items())]


def fair_shared(ready_with_key: dict[str, int]) -> list[dict[str, Any]]:
    """The fair-shared queues, by name: those with ready jobs that carry a fair key
    (``ready_with_key``: how many, per queue), those a registered job type with a
    ``fair_key`` enqueues to (its queue, else ``PQJOBS["DEFAULT_QUEUE"]``) and those
    ``PQJOBS["FAIR_QUEUES"]`` names."""
    declared: dict[str, list[str]] = {}
    for job_type in registry.all():
        if job_type.fair_key is not None:
            declared.setdefault(job_type.queue or conf.DEFAULT_QUEUE, []).append(job_type.name)
    try:
        fair_queues = conf.FAIR_QUEUES
    except ValueError:
        fair_queues = {}  # reported by the setting's check
    for queue in fair_queues:
        declared.setdefault(queue, []).append("PQJOBS['FAIR_QUEUES']")
    return [
        {
            "queue": queue,
            "ready_with_key": ready_with_key.get(queue, 0),
            "declared_by": sorted(declared.get(queue, [])),
        }
        for queue in sorted(set(ready_with_key) | set(declared))
    ]


def _groups(workers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The worker groups (``run_jobs --processes N --worker-id G``: processes ``G-1``...
    ``G-N``) of two processes or more, each summed up as jobs_health judges it: alive only
    if every process is."""
    members: dict[str, list[dict[str, Any]]] = {}
    for worker in workers:
        group = monitoring.group_of(worker["worker_id"])
        if group is not None:
            members.setdefault(group, []).append(worker)
    return [
        {
            "group": group,
            "processes": len(found),
            "live": sum(w["live"] for w in found),
            "threads": sum(w["concurrency"] or 0 for w in found),
            "running": sum(w["running"] for w in found),
            "hosts": ", ".join(sorted({w["hostname"] or "?" for w in found})),
        }
        for group, found in sorted(members.items())
        if len(found) > 1
    ]


def _age(at: datetime | None, seconds: float) -> SafeString | str:
    """A heartbeat as the console shows a time (``moment``), its age in seconds while
    that is short (a worker's liveness is judged by it), as any age after that."""
    age = f"{seconds:.0f} s ago" if seconds < 600 or at is None else None  # else "12 min ago"
    if at is None:
        return str(age)
    return moment(at, age)


# The chart takes the admin's colours (light and dark themes) where it can.
_CHART_BACKGROUND = "fill: var(--darkened-bg, #f7fafc)"
_CHART_TEXT = "fill: var(--body-quiet-color, #4a5568)"
_CHART_LINE = "stroke: var(--body-quiet-color, #4a5568)"
DONE_COLOUR = "#2f855a"
FAILED_COLOUR = "#c53030"
RETRIED_COLOUR = "#dd6b20"


def throughput_svg(per_minute: list[tuple[datetime, int, int, int]]) -> SafeString:
    """Bars per minute: done (green) under failed jobs (red) under failed attempts that were
    retried (orange). Each job that failed counts once. Under them a time axis, a tick every
    ten minutes, in the admin's time zone. Scales down to narrow screens."""
    width, bars_height, pad, axis_height = 600, 120, 20, 16
    height = bars_height + axis_height
    peak = max((done + failed + retried for _, done, failed, retried in per_minute), default=0)
    scale = (bars_height - pad) / peak if peak else 0
    bar = width / max(len(per_minute), 1)
    shapes = []
    ticks = []
    for n, (minute, done, failed, retried) in enumerate(per_minute):
        x = n * bar
        local = timezone.localtime(minute)
        ok_h, failed_h, retried_h = done * scale, failed * scale, retried * scale
        title = f"{local:%H:%M}: {done} done, {failed} failed, {retried} retried"
        shapes.append(
            (
                f"{x:.1f}",
                f"{bar - 1:.1f}",
                f"{bars_height - ok_h:.1f}",
                f"{ok_h:.1f}",
                f"{bars_height - ok_h - failed_h:.1f}",
                f"{failed_h:.1f}",
                f"{bars_height - ok_h - failed_h - retried_h:.1f}",
                f"{retried_h:.1f}",
                title,
            )
        )
        if local.minute % 10 == 0:
            middle = x + bar / 2
            # the labels at the ends stay inside the chart
            anchor = "start" if middle < 20 else "end" if middle > width - 20 else "middle"
            ticks.append((f"{middle:.1f}", bars_height, bars_height + 3, anchor, f"{local:%H:%M}"))
    bars = format_html_join(
        "",
        "<g><title>{8}</title>"
        '<rect x="{0}" y="{2}" width="{1}" height="{3}" fill="' + DONE_COLOUR + '"/>'
        '<rect x="{0}" y="{4}" width="{1}" height="{5}" fill="' + FAILED_COLOUR + '"/>'
        '<rect x="{0}" y="{6}" width="{1}" height="{7}" fill="' + RETRIED_COLOUR + '"/></g>',
        shapes,
    )
    axis = format_html_join(
        "",
        '<line x1="{0}" x2="{0}" y1="{1}" y2="{2}" style="' + _CHART_LINE + '"/>'
        '<text x="{0}" y="' + str(height - 2) + '" text-anchor="{3}">{4}</text>',
        ticks,
    )
    return format_html(
        '<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" viewBox="0 0 {} {}" '
        'style="max-width:100%;height:auto" class="pqjobs-chart" '
        'role="img" aria-label="jobs finished per minute, last hour">'
        '<rect width="100%" height="100%" style="{}"/>{}'
        '<g class="pqjobs-chart-axis" font-size="10" style="{}">'
        '<line x1="0" x2="{}" y1="{}" y2="{}" style="{}"/>{}</g>'
        '<text x="4" y="12" font-size="10" style="{}">peak {} / min</text></svg>',
        width,
        height,
        width,
        height,
        _CHART_BACKGROUND,
        bars,
        _CHART_TEXT,
        width,
        bars_height,
        bars_height,
        _CHART_LINE,
        axis,
        _CHART_TEXT,
        peak,
    )
