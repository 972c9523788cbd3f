"""A durable workflow on its job page: each step, sleep and wait, its time, and its result
(``workflows.py``). Results are cut short and shown as payloads are (masked for staff
without the secrets permission), and hidden from staff who may not see job data at all."""

from __future__ import annotations

from datetime import datetime

from django.db import connections
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import Job
from ..sql import queries
from . import display
from .excerpts import Excerpt

QUERIES = queries("admin_workflow")

SHOWN_STEPS = 200
RESULT_CHARS = 300

_STEPS = QUERIES["steps"]


def steps_table(job: Job, alias: str, show_data: bool, show_secrets: bool) -> SafeString:
    with connections[alias].cursor() as cursor:
        cursor.execute(_STEPS, [RESULT_CHARS, job.pk, SHOWN_STEPS])
        rows = cursor.fetchall()
    body = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        (
            (
                name,
                kind,
                _state(kind, finished_at, wake_at),
                display.moment(started_at),
                _result(text, length, show_data, show_secrets),
            )
            for name, kind, started_at, finished_at, wake_at, _attempt, text, length in rows
        ),
    )
    return format_html(
        '<table class="pqjobs-timeline"><tr><th>name</th><th>kind</th><th>state</th>'
        "<th>started</th><th>result</th></tr>{}</table>",
        body,
    )


def _state(kind: str, finished_at: datetime | None, wake_at: datetime | None) -> SafeString | str:
    if finished_at is not None:
        return format_html("done {}", display.moment(finished_at))
    if kind == "sleep":
        return format_html("sleeping until {}", display.moment(wake_at))
    if kind == "signal":
        return format_html("waiting; times out at {}", display.moment(wake_at))
    if kind == "child":
        return "waiting for the child job"
    return "running"


def _result(
    text: str | None, length: int | None, show_data: bool, show_secrets: bool
) -> SafeString | str:
    # shown as the payload and result are (display.json_excerpt): opened or masked, a cut
    # or unreadable one only to those who may see secrets
    if text is None:
        return "-"
    if not show_data:
        return "hidden"
    return display.json_excerpt(Excerpt(text, length or len(text)), show_secrets)
