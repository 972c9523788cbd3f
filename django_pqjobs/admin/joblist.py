"""The jobs list: its columns (the job type with a task's call, the status with what holds
the job or which worker runs it, when, the last error), its filters, orders, search and
paging, each served by an index; the rows read without the big columns (``excerpts.py``),
guarded (``changelist.py``)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from .. import flow, monitoring
from ..models import Job
from ..redaction import may_see_secrets, redact
from ..serialization import from_json
from ..statuses import FINISHED_STATUSES
from ..tasks.payload import describe_call
from . import display, excerpts, firstscreen, flowcontrol, jobfacts
from .changelist import GuardedListAdmin
from .filters import (
    BatchFilter,
    CallbackOfFilter,
    DateFilter,
    DependenciesFilter,
    DependentsFilter,
    FinishedFilter,
    HasErrorFilter,
    JobTypeFilter,
    QueueFilter,
    SequenceFilter,
    StatusFilter,
)
from .pagination import EstimatedCountPaginator
from .search import HELP_TEXT, job_search

TASK_CALL_CHARS = 80  # of a task's call in the list


class JobList(GuardedListAdmin):
    """The list of jobs (``JobAdmin``'s changelist)."""

    # Narrow enough for a laptop beside the admin's side bars: the queue and priority sit
    # under the job type; the attempts, the worker, what holds a blocked job and the
    # progress under the status; the run-after, start or finish time (with the duration) in
    # one column; the last error takes the rest.
    list_display = [
        "id",
        "job_type_cell",
        "status_cell",
        "when",
        "error",
    ]

    list_display_links = ["id", "job_type_cell"]

    list_filter = [
        StatusFilter,
        SequenceFilter,
        QueueFilter,
        JobTypeFilter,
        HasErrorFilter,
        ("created_at", DateFilter),
        ("finished_at", FinishedFilter),
        # Shown only while applied: the batch and job pages link to them.
        BatchFilter,
        CallbackOfFilter,
        DependenciesFilter,
        DependentsFilter,
    ]
    # Each order is one an index serves: the primary key, and (job_type, id DESC).
    list_orderings = {
        "id": (["id"], ["-id"]),
        "job_type_cell": (["job_type", "-id"], ["-job_type", "id"]),
    }
    list_narrowing_hint = (
        "Narrow it with the status, job type or has-error filter, or search for a job id."
    )
    # Shows the search box; the search itself is job_search (every branch indexed).
    search_fields = ["=id"]
    search_help_text = HELP_TEXT
    ordering = ["-id"]
    list_per_page = 50
    show_full_result_count = False
    paginator = EstimatedCountPaginator

    change_list_template = "admin/django_pqjobs/job/change_list.html"

    def shows_data(self, request: HttpRequest) -> bool:
        """Whether this user may see payloads, results, progress messages and errors."""
        return excerpts.shows_data(request)

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        if self.shows_data(request):
            return list(self.list_display)
        return ["error_type" if c == "error" else c for c in self.list_display]

    def list_rows(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return excerpts.list_rows(queryset, self.shows_data(request), may_see_secrets(request.user))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        return job_search(queryset, search_term), False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {"title": "Jobs", **(extra_context or {})}
        if request.method in ("GET", "HEAD"):
            extra["paused"] = flowcontrol.paused_rows(flow.paused(self.database_for(request)))
        return super().changelist_view(request, extra)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The list, its running jobs' workers looked up once (one query by primary key,
        only when the page shows a running job): a stale worker is flagged in its row."""
        changelist = super().get_changelist_instance(request)
        if request.method in ("GET", "HEAD"):
            rows = list(changelist.result_list)  # read now; the page renders these rows
            names = [j.locked_by for j in rows if j.status == "running" and j.locked_by]
            if names:
                seen = firstscreen.workers_seen(
                    changelist.result_list.db, names, monitoring.live_after()
                )
                for job in rows:
                    if job.status == "running" and job.locked_by in seen:
                        setattr(job, jobfacts.WORKER, seen[job.locked_by])
        return changelist

    # --- list columns ------------------------------------------------------------------------

    @admin.display(description="job type", ordering="job_type")
    def job_type_cell(self, job: Job) -> SafeString:
        """The job type (a task's path) on one line, never broken at its dots (cut short
        with its whole name on hover when the column is narrower); under it a task's call,
        then the queue and the priority."""
        priority = f" · priority {job.priority}" if job.priority else ""
        return format_html(
            '<span class="pqjobs-type" title="{}">{}</span>{}<span class="pqjobs-sub">{}{}</span>',
            job.job_type,
            job.job_type,
            _task_call(job),
            job.queue,
            priority,
        )

    @admin.display(description="status")
    def status_cell(self, job: Job) -> SafeString:
        lines = [f"attempts {job.attempts} / {job.max_attempts}"]
        if job.status == "blocked":
            lines.append(display.held_by(job.blocked_by, job.concurrency_key, job.rate_key))
        elif job.status == "waiting":
            lines.append(jobfacts.waiting_for(job.waiting_for))
        elif job.status == "running":
            note = jobfacts.worker_note(getattr(job, jobfacts.WORKER, None))
            lines.append(
                format_html(
                    "on {}{}", job.locked_by or "-", format_html(" — {}", note) if note else ""
                )
            )
            if job.cancel_requested_at is not None:
                lines.append("cancel requested")
        bar = display.progress_bar(excerpts.progress_of(job)) if job.status == "running" else "-"
        return format_html(
            "{}{}{}",
            display.status_badge(job.status),
            format_html_join("", '<span class="pqjobs-sub">{}</span>', ((line,) for line in lines)),
            "" if bar == "-" else format_html('<span class="pqjobs-sub">{}</span>', bar),
        )

    @admin.display(description="when")
    def when(self, job: Job) -> SafeString | str:
        """Ready and blocked: when it is due; waiting: after its dependencies, or (a parked
        workflow) when it wakes; running: since when; finished: when, and how long it ran."""
        if job.status == "running":
            return display.moment_lines(job.locked_at, "started")
        if job.finished_at is not None and job.status in FINISHED_STATUSES:
            took = display.duration(job.duration_ms) if job.duration_ms is not None else ""
            return display.moment_lines(job.finished_at, after=f"took {took}" if took else "")
        if job.status == "waiting" and job.waiting_for == 0:
            return display.moment_lines(job.run_after, "wakes")
        if job.status == "waiting":
            return "after its dependencies"
        return display.moment_lines(job.run_after, "due")

    @admin.display(description="last error")
    def error(self, job: Job) -> SafeString | str:
        return display.error_summary(
            getattr(job, "error_head", None), getattr(job, "error_tail", None)
        )


def _task_call(job: Job) -> SafeString | str:
    """``send_receipt(42, to="a@example.com")`` for a task job whose payload the list read
    (see ``excerpts.task_call_payload``), else nothing."""
    text = getattr(job, "task_payload", None)
    if not text:
        return ""
    try:
        value = from_json(text)
        if getattr(job, "mask_secrets", False):
            value = redact(value)
        call = describe_call(job.job_type, value, limit=TASK_CALL_CHARS)
    except (ValueError, RecursionError):
        return ""  # not JSON this page can parse
    return format_html('<span class="pqjobs-sub pqjobs-call">{}</span>', call) if call else ""
