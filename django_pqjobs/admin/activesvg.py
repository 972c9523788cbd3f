"""The dashboard's active jobs, drawn as SVG: a bar per queue, its running, ready, blocked
and waiting jobs in their statuses' colours, each part a link to them in the job list
(pure: the dashboard read the numbers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from . import display, svg

MAX_QUEUES = 20  # of the dashboard's active jobs

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
                {"queue": queue[: svg.TITLE_CHARS], "status__exact": status}, errors="surrogatepass"
            )
            parts.append(
                format_html(
                    '<a href="{}?{}" class="pqjobs-active-part" data-status="{}">'
                    "<title>queue {}: {} {}</title>"
                    '<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/></a>',
                    list_url,
                    query,
                    status,
                    svg.clean(queue, svg.TITLE_CHARS),
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
                svg.STRONG_TEXT,
                svg.clean(queue, 26),
                format_html_join("", "{}", ((p,) for p in parts)),
                f"{x + 4:.1f}",
                y + row_h - 6,
                svg.TEXT,
                f"{sum(counts.values()):,}",
            )
        )
    height = 8 + len(shown) * row_h + (16 if left_out > 0 else 0)
    more = (
        format_html(
            '<text x="4" y="{}" font-size="10" style="{}">and {} more queues</text>',
            height - 4,
            svg.TEXT,
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
        svg.BACKGROUND,
        format_html_join("", "{}", ((r,) for r in rows)),
        more,
    )
