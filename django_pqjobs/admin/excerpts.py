"""What the admin reads of the columns that can be huge.

A payload or a result can be megabytes, an error or a traceback typed in by SQL as long as
you like, and a job can have thousands of failed attempts. The job list never reads the
result, the progress or the error: it reads a few hundred characters of the error and of
the progress; of the payloads only those of task jobs stored in at most ``TASK_CALL_BYTES``
(to show the task's call). The job page reads at most ``SHOWN_CHARS`` of the payload and
the result (and their full length, to say how much it leaves out), the last
``SHOWN_TRACEBACK_CHARS`` of each traceback, and the latest ``SHOWN_ATTEMPTS`` attempts.
Without permission to see a job's data (``PQJOBS['ADMIN_DATA_PERMISSION']``) none of it is
read at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.db.models import (
    Case,
    Count,
    F,
    Func,
    IntegerField,
    Q,
    QuerySet,
    TextField,
    Value,
    When,
    Window,
)
from django.db.models.fields.json import KT
from django.db.models.functions import Cast, Left, Length, Right
from django.db.models.lookups import LessThanOrEqual
from django.http import HttpRequest

from .. import audit
from ..conf import conf
from ..models import Job, JobAttempt
from ..serialization import ERROR_TEXT_LIMIT
from ..sql import queries
from ..tasks.payload import BACKEND_KEY

QUERIES = queries("admin_excerpts")

SHOWN_CHARS = 64 * 1024
SHOWN_TRACEBACK_CHARS = ERROR_TEXT_LIMIT
SHOWN_ATTEMPTS = 20
ERROR_SUMMARY_CHARS = 400
TASK_CALL_BYTES = 2048
PROGRESS_NUMBER_CHARS = 40
PROGRESS_MESSAGE_CHARS = 200
# Columns of a job that only the excerpts below read.
BIG_COLUMNS = ("payload", "result", "progress", "last_error")


def shows_data(request: HttpRequest) -> bool:
    """Whether this user may see payloads, results, progress messages and errors."""
    permission = conf.ADMIN_DATA_PERMISSION
    return permission is None or request.user.has_perm(permission)


@dataclass(frozen=True)
class Excerpt:
    """Part of a longer text: ``text`` and the ``length`` of the whole."""

    text: str
    length: int

    @property
    def cut(self) -> int:
        """How many characters are not in ``text``."""
        return self.length - len(self.text)


# --- the job list ----------------------------------------------------------------------------


def list_rows(queryset: QuerySet[Job], show_data: bool, show_secrets: bool) -> QuerySet[Job]:
    """The list's rows: no big column, but the start and end of the error (for its summary
    line), the progress numbers and message, each cut short, and a task's call from a small
    payload (see :func:`task_call_payload`; ``mask_secrets`` when the user may not see
    them)."""
    columns: dict[str, Any] = {
        "progress_done": Left(KT("progress__done"), PROGRESS_NUMBER_CHARS),
        "progress_total": Left(KT("progress__total"), PROGRESS_NUMBER_CHARS),
    }
    if show_data:
        columns["error_head"] = Left("last_error", ERROR_SUMMARY_CHARS)
        columns["error_tail"] = Right("last_error", ERROR_SUMMARY_CHARS)
        columns["progress_message"] = Left(KT("progress__message"), PROGRESS_MESSAGE_CHARS)
        columns["task_payload"] = task_call_payload()
        if not show_secrets:
            columns["mask_secrets"] = Value(True)
    return queryset.defer(*BIG_COLUMNS).annotate(**columns)


def task_call_payload() -> Case:
    """The payload as text, of a task job whose payload is stored in at most
    ``TASK_CALL_BYTES`` (NULL for any other): what the list needs to show the task's call.
    Its stored size is read first, from the value's header, so a big payload is never
    read, nor decompressed."""
    stored_bytes = Func(F("payload"), function="pg_column_size", output_field=IntegerField())
    return Case(
        When(
            LessThanOrEqual(stored_bytes, TASK_CALL_BYTES),
            then=Case(When(Q(payload__has_key=BACKEND_KEY), then=Cast("payload", TextField()))),
        )
    )


def progress_of(job: Job) -> dict[str, Any] | None:
    """The progress to show of a job read by :func:`list_rows` or :func:`load_page`."""
    page = getattr(job, _PAGE_ATTRIBUTE, None)
    if isinstance(page, JobPage):
        return page.progress
    values = {
        "done": getattr(job, "progress_done", None),
        "total": getattr(job, "progress_total", None),
        "message": getattr(job, "progress_message", None),
    }
    return values if any(v is not None for v in values.values()) else None


# --- the job page ----------------------------------------------------------------------------

# The LATERAL subquery (kept apart by OFFSET 0) turns each jsonb value into text once, for
# both its excerpt and its length.
_PAGE_DATA = QUERIES["page_data"]
_PAGE_PROGRESS = QUERIES["page_progress"]
# Looked for on the hot shelf first (its partition alone planned and locked), then on every
# shelf (a job in history).
_ON_SHELVES = ("j.shelf = 'hot' AND", "")


@dataclass
class JobPage:
    """What the job page shows of one job's big columns and attempt history."""

    show_data: bool
    show_secrets: bool = False  # and secret fields, and encrypted values, in the clear
    has_steps: bool = False  # a durable workflow's: its Workflow section is shown
    payload: Excerpt | None = None
    result: Excerpt | None = None
    last_error: Excerpt | None = None
    progress: dict[str, Any] | None = None
    attempts: list[JobAttempt] = field(default_factory=list)
    attempts_total: int = 0
    events: list[audit.Event] = field(default_factory=list)  # what operators did to it

    @property
    def attempts_not_shown(self) -> int:
        return self.attempts_total - len(self.attempts)


def load_page(alias: str, job_id: int, show_data: bool, show_secrets: bool) -> JobPage:
    """Read the excerpts, the latest attempts and the latest operator actions of job
    ``job_id`` (three queries)."""
    page = JobPage(show_data=show_data, show_secrets=show_secrets)
    params = {
        "id": job_id,
        "chars": SHOWN_CHARS,
        "tb_chars": SHOWN_TRACEBACK_CHARS,
        "number_chars": PROGRESS_NUMBER_CHARS,
        "message_chars": PROGRESS_MESSAGE_CHARS,
    }
    with connections[alias].cursor() as cursor:
        for shelf in _ON_SHELVES:
            sql = _PAGE_DATA if show_data else _PAGE_PROGRESS
            cursor.execute(sql.replace("{shelf}", shelf), params)
            row = cursor.fetchone()
            if row is not None:
                break
    if row is not None:
        if show_data:
            payload, payload_len, result, result_len, error, error_len = row[:6]
            page.payload = Excerpt(payload or "", payload_len or 0)
            page.result = None if result is None else Excerpt(result, result_len)
            page.last_error = Excerpt(error or "", error_len or 0)
            has_progress, done, total, message, page.has_steps = row[6:]
        else:
            has_progress, done, total, page.has_steps = row
            message = None
        if has_progress:
            page.progress = {"done": done, "total": total, "message": message}
    page.attempts, page.attempts_total = latest_attempts(alias, job_id, show_data)
    page.events = audit.job_events(alias, job_id)
    return page


def latest_attempts(alias: str, job_id: int, show_data: bool) -> tuple[list[JobAttempt], int]:
    """The latest ``SHOWN_ATTEMPTS`` failed attempts, oldest first, and how many there are.

    With ``show_data``, each has ``traceback_tail`` and ``traceback_length``.
    """
    rows = (
        JobAttempt.objects.using(alias)
        .filter(job_id=job_id)
        .defer("traceback")
        .annotate(total=Window(Count("*")))
        .order_by("-attempt", "-id")
    )
    if show_data:
        rows = rows.annotate(
            traceback_tail=Right("traceback", SHOWN_TRACEBACK_CHARS),
            traceback_length=Length("traceback"),
        )
    latest: list[JobAttempt] = list(rows[:SHOWN_ATTEMPTS])
    total = int(getattr(latest[0], "total", 0)) if latest else 0
    return latest[::-1], total


_PAGE_ATTRIBUTE = "_pqjobs_page"


def attach(job: Job, page: JobPage) -> None:
    """Keep ``page`` with the job object this request shows."""
    setattr(job, _PAGE_ATTRIBUTE, page)


def page_of(job: Job) -> JobPage:
    """The :class:`JobPage` attached to ``job`` (an empty one if none was)."""
    page = getattr(job, _PAGE_ATTRIBUTE, None)
    return page if isinstance(page, JobPage) else JobPage(show_data=False)
