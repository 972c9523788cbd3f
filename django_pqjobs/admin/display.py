"""Formatting for the admin pages: badges, relative times, JSON, progress bars. All output is
built with format_html, so nothing a job contains can inject markup."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.contrib import admin
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from .. import protection, redaction
from ..conf import conf
from ..errors import InvalidJobOption
from ..models import CALENDAR_END, CALENDAR_START
from .excerpts import Excerpt

STATUS_COLOURS = {
    "waiting": "#2c7a7b",
    "ready": "#417690",
    "blocked": "#6b46c1",
    "running": "#b7791f",
    "done": "#2f855a",
    "failed": "#c53030",
    "cancelled": "#718096",
    "expired": "#975a16",
}


def status_badge(status: str) -> SafeString:
    colour = STATUS_COLOURS.get(status, "#4a5568")
    return format_html(
        '<span style="background:{};color:#fff;padding:1px 7px;border-radius:8px;'
        'font-size:11px;white-space:nowrap">{}</span>',
        colour,
        status,
    )


# What holds a blocked job back, as the list and the job page say it.
BLOCKED_BY = {
    "limit": "concurrency limit of key {key}",
    "rate": "rate limit of {rate_key}",
    "paused": "its queue or job type is paused",
}


def held_by(blocked_by: str | None, key: str | None, rate_key: str | None) -> str:
    """``concurrency limit of key account:7``: what holds a blocked job back."""
    text = BLOCKED_BY.get(blocked_by or "", "flow control")
    return text.format(key=key or "-", rate_key=rate_key or "-")


def breakable(name: str) -> SafeString:
    """A dotted or snake_case name that a narrow column may wrap after its dots and
    underscores (never inside a word)."""
    parts = re.split(r"(?<=[._])", name)
    return format_html_join(mark_safe("<wbr>"), "{}", ((part,) for part in parts))


def absolute(value: datetime) -> str:
    """``2026-11-23 16:41:06 UTC``: the one format of times in the console, in the current
    time zone. A time stored past Python's calendar (read back at its edge) says so."""
    if value >= CALENDAR_END:
        return "after the year 9999"
    if value <= CALENDAR_START:
        return "before the year 1"
    try:
        local = timezone.localtime(value) if timezone.is_aware(value) else value
    except OverflowError:  # the zone's offset pushes it past the calendar's edge
        local = value
    return local.strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def moment(value: datetime | None, age: str | None = None) -> SafeString | str:
    """A point in time, the one way the console shows one: as :func:`absolute` writes it
    (with its zone), then its age (:func:`relative`, or ``age`` when the caller knows it
    better): ``2026-11-23 16:41:06 UTC (3 min ago)``."""
    if value is None:
        return "-"
    return format_html(
        '<time datetime="{}">{}</time> <span class="pqjobs-age">({})</span>',
        value.isoformat(),
        absolute(value),
        relative(value) if age is None else age,
    )


def moment_lines(value: datetime | None, verb: str = "", after: str = "") -> SafeString | str:
    """:func:`moment` on two lines, for a narrow list column: the time with its zone, then
    its age (``verb`` before it, ``after`` after it: ``due in 4 min``, ``3 min ago · took
    1.2 s``)."""
    if value is None:
        return "-"
    age = " ".join(part for part in (verb, relative(value)) if part)
    return format_html(
        '<time datetime="{}">{}</time><span class="pqjobs-sub pqjobs-age">{}{}</span>',
        value.isoformat(),
        absolute(value),
        age,
        f" · {after}" if after else "",
    )


def moment_column(field: str, description: str) -> Callable[[Any, Any], SafeString | str]:
    """A list column showing the time in ``field`` as :func:`moment` does, sorted by it."""

    @admin.display(description=description, ordering=field)
    def column(model_admin: Any, obj: Any) -> SafeString | str:
        return moment(getattr(obj, field))

    return column


def relative(moment: datetime | None, now: datetime | None = None) -> str:
    """'in 4 min', '3 h ago', 'just now'."""
    if moment is None:
        return "-"
    if moment >= CALENDAR_END or moment <= CALENDAR_START:
        return "beyond the calendar"
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
    return _cut(lines[-1] if lines[0].startswith("Traceback") else lines[0], limit)


def error_summary(head: str | None, tail: str | None, limit: int = 120) -> SafeString | str:
    """One line of an error known by its first and last few hundred characters: the first
    line of a message, or the exception a traceback ends with (see :func:`headline`)."""
    head = head or ""
    if not head.lstrip().startswith("Traceback"):
        return first_line(head, limit)
    raised = raised_error(tail or "")
    if raised.error_type:
        return headline(raised, limit)
    # the tail does not reach back to the last frame: its last line
    lines = [line for line in (tail or "").splitlines() if line.strip()]
    return _cut(lines[-1].strip() if lines else "", limit)


_FRAME = re.compile(r'\s*File "(?P<file>[^"\n]*)", line (?P<line>\d+), in (?P<function>.+)')
_EXCEPTION_NAME = re.compile(r"[A-Za-z_][\w.]*")
ERROR_MESSAGE_CHARS = 500


@dataclass(frozen=True)
class RaisedError:
    """The exception an error text (a traceback, or a message alone) ends with."""

    error_type: str  # as the traceback names it; "" when the text does not say
    message: str
    where: str  # 'in charge, "billing/jobs.py", line 12': its last frame ("" if none)


def raised_error(text: str, limit: int = ERROR_MESSAGE_CHARS) -> RaisedError:
    """What a job's last error says at its end: the exception, its message (up to
    ``limit`` characters) and the frame that raised it. A text without a traceback (a
    timeout, an unknown job type) is all message."""
    lines = text.strip("\n").splitlines()
    frames = [n for n, line in enumerate(lines) if _FRAME.fullmatch(line)]
    if not frames:
        return RaisedError("", _cut(text.strip(), limit), "")
    frame = _FRAME.fullmatch(lines[frames[-1]])
    assert frame is not None
    # After the frame: its source line and markers (indented), then the exception.
    rest = lines[frames[-1] + 1 :]
    while rest and (not rest[0].strip() or rest[0][:1].isspace()):
        rest = rest[1:]
    header = rest[0] if rest else ""
    name, _, message = header.partition(":")
    if not _EXCEPTION_NAME.fullmatch(name):
        name, message = "", header
    message = "\n".join([message.strip(), *rest[1:]]).strip()
    where = f'in {frame["function"]}, "{frame["file"]}", line {frame["line"]}'
    return RaisedError(name, _cut(message, limit), where)


def headline(raised: RaisedError, limit: int = 120) -> SafeString | str:
    """``PermanentError: card declined``: the exception by its class alone and the first
    line of its message, the whole ``django_pqjobs.errors.PermanentError`` on hover. A
    narrow column then wraps between words, not inside a module path."""
    name = raised.error_type.rpartition(".")[2]
    first = next((line.strip() for line in raised.message.splitlines() if line.strip()), "")
    line = _cut(f"{name}: {first}" if first else name, limit)
    if name == raised.error_type:
        return line
    return format_html('<span title="{}">{}</span>', raised.error_type, line)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre style="white-space:pre-wrap;margin:0">{}</pre>', text)


def json_excerpt(excerpt: Excerpt, show_secrets: bool) -> SafeString:
    """JSON text, indented when it is whole; a cut one as it is, saying how much is cut.
    For a user who may see secrets, a value encrypted at rest is shown opened (or says why
    it cannot be); for one who may not, secret fields and encrypted values are masked
    (``redaction.py``), and a cut excerpt, which cannot be read to mask, is not shown."""
    if excerpt.cut <= 0:
        try:
            value = json.loads(excerpt.text)
        except (ValueError, RecursionError):
            value = excerpt  # not parseable here (too deep): shown as stored
        if value is excerpt and not show_secrets:
            return format_html("<p>{}</p>", redaction.TOO_DEEP)
        if value is not excerpt:
            if not show_secrets:
                return pretty_json(redaction.redact(value))
            if protection.holds_sealed(value):
                return _opened(value)
            return pretty_json(value)
    if not show_secrets:
        return format_html(
            "<p>{} characters: too long to show with its secrets masked here. Users with "
            "the permission {} see it.</p>",
            f"{excerpt.length:,}",
            repr(conf.ADMIN_SECRETS_PERMISSION),
        )
    return format_html(
        '<pre style="white-space:pre-wrap;margin:0">{}</pre>{}',
        excerpt.text,
        _cut_note(excerpt, "first"),
    )


def _opened(sealed: Any) -> SafeString:
    try:
        # shown to a user who may see secrets: whatever type it was sealed for
        value = protection.reveal_value(sealed, "this value", None)
    except (protection.SealedError, InvalidJobOption) as exc:
        return format_html("<p>Encrypted at rest; it cannot be shown: {}</p>", exc)
    return format_html(
        "<p>Encrypted at rest (opened for you: you may see secrets).</p>{}", pretty_json(value)
    )


def text_tail(excerpt: Excerpt) -> SafeString:
    """The end of a long text (a traceback ends with its exception)."""
    return format_html("{}{}", _cut_note(excerpt, "last"), preformatted(excerpt.text))


def _cut_note(excerpt: Excerpt, which: str) -> SafeString | str:
    if excerpt.cut <= 0:
        return ""
    return format_html(
        '<p class="help">Showing the {} {} of {} characters ({} not shown).</p>',
        which,
        f"{len(excerpt.text):,}",
        f"{excerpt.length:,}",
        f"{excerpt.cut:,}",
    )


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


def batch_bar(done: int, failed: int, cancelled: int, total: int) -> SafeString:
    """A batch's progress: its done (green), failed (red) and cancelled (grey) members side
    by side on a bar as long as all its members, the unfinished ones left empty."""
    whole = max(total, done + failed + cancelled, 1)
    parts = (
        (done, STATUS_COLOURS["done"], "done"),
        (failed, STATUS_COLOURS["failed"], "failed"),
        (cancelled, STATUS_COLOURS["cancelled"], "cancelled"),
    )
    segments = format_html_join(
        "",
        '<span class="pqjobs-bar-{}" style="display:inline-block;width:{}%;height:8px;'
        'background:{}"></span>',
        ((name, f"{100 * n / whole:.2f}", colour) for n, colour, name in parts if n > 0),
    )
    return format_html(
        '<span class="pqjobs-batch-bar" title="{} done, {} failed, {} cancelled of {}" '
        'style="display:inline-block;width:100px;height:8px;background:#e2e8f0;'
        "border-radius:4px;overflow:hidden;vertical-align:middle;white-space:nowrap;"
        'line-height:0">{}</span>',
        done,
        failed,
        cancelled,
        total,
        segments,
    )
