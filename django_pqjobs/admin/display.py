"""Formatting for the admin pages: badges, relative times, JSON, progress bars. All output is
built with format_html, so nothing a job contains can inject markup."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

STATUS_COLOURS = {
    "ready": "#417690",
    "running": "#b7791f",
    "done": "#2f855a",
    "failed": "#c53030",
    "cancelled": "#718096",
}


def status_badge(status: str) -> SafeString:
    colour = STATUS_COLOURS.get(status, "#4a5568")
    return format_html(
        '<span style="background:{};color:#fff;padding:1px 7px;border-radius:8px;'
        'font-size:11px;white-space:nowrap">{}</span>',
        colour,
        status,
    )


def relative(moment: datetime | None, now: datetime | None = None) -> str:
    """'in 4 min', '3 h ago', 'just now'."""
    if moment is None:
        return "-"
    now = now or timezone.now()
    seconds = (moment - now).total_seconds()
    future = seconds > 0
    seconds = abs(seconds)
    if seconds < 45:
        return "just now" if not future else "in a few s"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            amount = round(seconds / size)
            return f"in {amount} {unit}" if future else f"{amount} {unit} ago"
    return "just now"


def duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60000:.1f} min"


def first_line(text: str, limit: int = 120) -> str:
    lines = [line for line in (text or "").strip().splitlines() if line.strip()]
    if not lines:
        return ""
    line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return line if len(line) <= limit else line[: limit - 1] + "…"


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre style="white-space:pre-wrap;margin:0">{}</pre>', text)


def preformatted(text: str) -> SafeString:
    return format_html(
        '<pre style="white-space:pre-wrap;margin:0;max-height:30em;overflow:auto">{}</pre>',
        text,
    )


def progress_bar(progress: dict[str, Any] | None) -> SafeString | str:
    if not progress:
        return "-"
    done: Any = progress.get("done")
    total: Any = progress.get("total")
    message = str(progress.get("message") or "")
    try:
        percent = max(0.0, min(100.0, float(done) / float(total) * 100)) if total else None
    except (TypeError, ValueError, ZeroDivisionError):
        percent = None
    if percent is None:
        return format_html("{} {}", done, message)
    return format_html(
        '<span title="{}"><span style="display:inline-block;width:80px;height:8px;'
        'background:#e2e8f0;border-radius:4px;vertical-align:middle">'
        '<span style="display:block;width:{}%;height:8px;background:#417690;'
        'border-radius:4px"></span></span> {}% {}</span>',
        f"{done} / {total}",
        f"{percent:.0f}",
        f"{percent:.0f}",
        message,
    )
