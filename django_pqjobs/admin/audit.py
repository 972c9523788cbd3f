"""Admin for the audit trail: every operator action, newest first, read-only.

A job's own actions are also on its page (its timeline); this list keeps the ones whose job
is gone (deleted or pruned) and the ones on queues, job types and schedules.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import OperatorAction
from ..statuses import AuditAction
from . import display
from .changelist import GuardedListAdmin, RefusedQuery
from .pagination import EstimatedCountPaginator
from .readonly import ReadOnlyAdmin
from .search import whole_number


class ActionFilter(admin.SimpleListFilter):
    title = "action"
    parameter_name = "action"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(str(value), str(label)) for value, label in AuditAction.choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        value = self.value()
        if not value:
            return queryset
        if value not in AuditAction.values:
            raise RefusedQuery(
                f"Filter 'action' (action={value!r}): one of {', '.join(AuditAction.values)}"
            )
        return queryset.filter(action=value)


@admin.register(OperatorAction)
class OperatorActionAdmin(ReadOnlyAdmin, GuardedListAdmin):
    list_display = ["id", "when", "actor", "action", "what", "detail"]
    list_display_links = None
    list_filter = [ActionFilter]
    list_orderings = {"id": (["id"], ["-id"])}
    search_fields = ["=actor"]
    search_help_text = "Exact username, or a job id (its actions, even once it is deleted)."
    ordering = ["-id"]
    list_per_page = 100
    show_full_result_count = False
    paginator = EstimatedCountPaginator

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(
            request, {"title": "Operator actions", **(extra_context or {})}
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        condition = Q(actor=term)
        number = whole_number(term)
        if number is not None:
            condition |= Q(job_id=number)
        return queryset.filter(condition), False

    @admin.display(description="when")
    def when(self, row: OperatorAction) -> SafeString | str:
        return display.moment(row.at)

    @admin.display(description="on")
    def what(self, row: OperatorAction) -> SafeString | str:
        if row.job_id is not None:
            url = reverse("admin:django_pqjobs_job_change", args=[row.job_id])
            return format_html('<a href="{}">job {}</a> ({})', url, row.job_id, row.target)
        if row.schedule_id is not None:
            url = reverse("admin:django_pqjobs_schedule_change", args=[row.schedule_id])
            return format_html('<a href="{}">schedule {}</a>', url, row.target)
        return row.target or "-"
