"""Admin for jobs: list, filters, actions (retry, cancel, run now), job page, dashboard.

Every action is one conditional UPDATE from the state machine (``worker/queries.py``), so it
never overwrites what a worker did meanwhile; jobs in a status the action does not apply to
are reported as skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import ngettext
from django.views.decorators.http import require_POST

from ..conf import conf
from ..models import Job, JobAttempt
from ..worker import queries
from . import display
from .dashboard import collect
from .filters import HasErrorFilter, JobTypeFilter, QueueFilter
from .pagination import EstimatedCountPaginator
from .search import HELP_TEXT, job_search


def _report(
    admin_: JobAdmin, request: HttpRequest, verb: str, changed: int, asked: int, why: str
) -> None:
    skipped = asked - changed
    text = ngettext("%(n)d job %(verb)s.", "%(n)d jobs %(verb)s.", changed) % {
        "n": changed,
        "verb": verb,
    }
    if skipped:
        text += " " + ngettext("%(n)d skipped: %(why)s.", "%(n)d skipped: %(why)s.", skipped) % {
            "n": skipped,
            "why": why,
        }
    admin_.message_user(request, text, messages.SUCCESS if changed else messages.WARNING)


def retry_jobs(ids: Sequence[int]) -> tuple[int, str]:
    return len(queries.requeue_many(conf.DATABASE, ids)), "only failed or cancelled jobs retry"


def cancel_jobs(ids: Sequence[int]) -> tuple[int, str]:
    result = queries.cancel_many(conf.DATABASE, ids)
    return (
        len(result.cancelled) + len(result.cancel_requested),
        "already finished (or cancel already requested)",
    )


def run_jobs_now(ids: Sequence[int]) -> tuple[int, str]:
    return len(queries.run_now_many(conf.DATABASE, ids)), "only delayed ready jobs can run now"


ACTIONS: dict[str, tuple[str, Callable[[Sequence[int]], tuple[int, str]]]] = {
    "retry": ("put back to ready", retry_jobs),
    "cancel": ("cancelled or asked to stop", cancel_jobs),
    "run-now": ("made due now", run_jobs_now),
}


class JobAttemptInline(admin.TabularInline):
    model = JobAttempt
    extra = 0
    can_delete = False
    fields = ("attempt", "outcome", "worker_id", "started_at", "finished_at", "error_type")
    readonly_fields = fields
    ordering = ["attempt", "id"]
    verbose_name = "failed attempt"

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    list_display = [
        "id",
        "job_type",
        "queue",
        "status_badge",
        "priority",
        "tries",
        "run_after_relative",
        "duration",
        "locked_by",
        "error",
        "progress_bar",
    ]
    list_display_links = ["id", "job_type"]
    list_filter = [
        "status",
        QueueFilter,
        JobTypeFilter,
        HasErrorFilter,
        ("created_at", admin.DateFieldListFilter),
        ("finished_at", admin.DateFieldListFilter),
    ]
    # Shows the search box; the search itself is job_search (every branch indexed).
    search_fields = ["=id"]
    search_help_text = HELP_TEXT
    ordering = ["-id"]
    list_per_page = 50
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    actions = ["retry_action", "cancel_action", "run_now_action"]
    inlines = [JobAttemptInline]
    change_form_template = "admin/django_pqjobs/job/change_form.html"
    change_list_template = "admin/django_pqjobs/job/change_list.html"
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "status_badge",
                    "job_type",
                    "queue",
                    "priority",
                    "tries",
                    "dedupe_key",
                    "links",
                ]
            },
        ),
        ("Payload and result", {"fields": ["payload_pretty", "result_pretty", "progress_bar"]}),
        (
            "Timing",
            {
                "fields": [
                    "created_at",
                    "run_after",
                    "locked_at",
                    "locked_by",
                    "heartbeat_at",
                    "finished_at",
                    "duration",
                    "timeout_seconds",
                    "cancel_requested_at",
                ]
            },
        ),
        ("Timeline", {"fields": ["timeline"]}),
        ("Errors", {"fields": ["error_type", "tracebacks"]}),
    ]

    # --- permissions: read-only; actions need the change permission -----------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(f) for fieldset in self.fieldsets for f in fieldset[1]["fields"]]

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).using(conf.DATABASE)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        return job_search(queryset, search_term), False

    # --- list columns ------------------------------------------------------------------------

    @admin.display(description="status", ordering="status")
    def status_badge(self, job: Job) -> SafeString:
        return display.status_badge(job.status)

    @admin.display(description="attempts")
    def tries(self, job: Job) -> str:
        return f"{job.attempts} / {job.max_attempts}"

    @admin.display(description="run after", ordering="run_after")
    def run_after_relative(self, job: Job) -> SafeString:
        return format_html(
            '<span title="{}">{}</span>', job.run_after, display.relative(job.run_after)
        )

    @admin.display(description="duration", ordering="duration_ms")
    def duration(self, job: Job) -> str:
        return display.duration(job.duration_ms)

    @admin.display(description="last error")
    def error(self, job: Job) -> str:
        return display.first_line(job.last_error)

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> SafeString | str:
        return display.progress_bar(job.progress)

    # --- job page ----------------------------------------------------------------------------

    @admin.display(description="payload")
    def payload_pretty(self, job: Job) -> SafeString:
        return display.pretty_json(job.payload)

    @admin.display(description="result")
    def result_pretty(self, job: Job) -> SafeString | str:
        return "-" if job.result is None else display.pretty_json(job.result)

    @admin.display(description="related")
    def links(self, job: Job) -> SafeString | str:
        parts = []
        if job.parent_id:
            url = reverse("admin:django_pqjobs_job_change", args=[job.parent_id])
            parts.append(format_html('parent: <a href="{}">job {}</a>', url, job.parent_id))
        # A child is enqueued after its parent, so walking the primary key upwards from the
        # parent finds the children early (parent_id itself has no index).
        children = list(
            Job.objects.using(conf.DATABASE)
            .filter(parent_id=job.pk, pk__gt=job.pk)
            .order_by("pk")
            .values_list("pk", flat=True)[:20]
        )
        if children:
            items = format_html_join(
                ", ",
                '<a href="{}">{}</a>',
                ((reverse("admin:django_pqjobs_job_change", args=[c]), c) for c in children),
            )
            parts.append(format_html("children: {}", items))
        if job.schedule_id:
            url = reverse("admin:django_pqjobs_schedule_change", args=[job.schedule_id])
            parts.append(format_html('schedule: <a href="{}">{}</a>', url, job.schedule_id))
        return format_html_join(mark_safe("<br>"), "{}", ((p,) for p in parts)) if parts else "-"

    @admin.display(description="timeline")
    def timeline(self, job: Job) -> SafeString:
        events: list[tuple[Any, str, str]] = [(job.created_at, "created", "")]
        for attempt in job.failed_attempts.all():
            events.append(
                (attempt.started_at, f"attempt {attempt.attempt} started", attempt.worker_id)
            )
            events.append(
                (
                    attempt.finished_at,
                    f"attempt {attempt.attempt}: {attempt.outcome}",
                    display.first_line(attempt.traceback),
                )
            )
        if job.status == "running" and job.locked_at:
            events.append(
                (job.locked_at, f"attempt {job.attempts} started (running)", job.locked_by or "")
            )
        if job.finished_at:
            if job.status == "done" and job.locked_at:
                events.append(
                    (job.locked_at, f"attempt {job.attempts} started", job.locked_by or "")
                )
            events.append((job.finished_at, job.status, display.duration(job.duration_ms)))
        events = [e for e in events if e[0] is not None]
        events.sort(key=lambda e: e[0])
        rows = format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td></tr>", events)
        return format_html('<table class="pqjobs-timeline">{}</table>', rows)

    @admin.display(description="tracebacks of failed attempts")
    def tracebacks(self, job: Job) -> SafeString | str:
        attempts = list(job.failed_attempts.all())
        if not attempts:
            return display.preformatted(job.last_error) if job.last_error else "-"
        return format_html_join(
            "",
            "<h4>attempt {} — {} ({})</h4>{}",
            (
                (a.attempt, a.outcome, a.error_type, display.preformatted(a.traceback))
                for a in attempts
            ),
        )

    # --- actions -----------------------------------------------------------------------------

    def _bulk(self, request: HttpRequest, queryset: QuerySet, name: str) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        verb, action = ACTIONS[name]
        changed, why = action(ids)
        _report(self, request, verb, changed, len(ids), why)

    @admin.action(description="Retry selected jobs (failed / cancelled)", permissions=["change"])
    def retry_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "retry")

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "cancel")

    @admin.action(description="Run selected delayed jobs now", permissions=["change"])
    def run_now_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "run-now")

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name="django_pqjobs_job_dashboard",
            ),
            path(
                "<int:job_id>/action/<str:action>/",
                self.admin_site.admin_view(self.object_action),
                name="django_pqjobs_job_action",
            ),
        ]
        return own + super().get_urls()

    def object_action(self, request: HttpRequest, job_id: int, action: str) -> HttpResponse:
        """The Retry / Cancel / Run now buttons of a job's page (POST, CSRF-protected)."""
        if action not in ACTIONS:
            raise PermissionDenied
        return require_POST(self._object_action)(request, job_id, action)

    def _object_action(self, request: HttpRequest, job_id: int, action: str) -> HttpResponse:
        job = get_object_or_404(self.get_queryset(request), pk=job_id)
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        verb, run = ACTIONS[action]
        changed, why = run([job.pk])
        _report(self, request, verb, changed, 1, why)
        return HttpResponseRedirect(reverse("admin:django_pqjobs_job_change", args=[job.pk]))

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        extra["can_act"] = self.has_change_permission(request)
        return super().change_view(request, object_id, form_url, extra)

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "title": "Job queue dashboard",
            "opts": self.model._meta,
            "dashboard": collect(),
            "stale_timeout": conf.STALE_TIMEOUT,
        }
        return TemplateResponse(request, "admin/django_pqjobs/job/dashboard.html", context)
