"""Admin for batches: read-only. A batch's counts and callbacks are the database's to keep
(sql/schema/composition.sql); its members change through the job actions (a Retry of a failed member
reopens the batch).

The list shows each batch's progress; the batch page its counts, its members by status
(one GROUP BY over the partial index ``pqjobs_job_batch``, each status a link to the job
list filtered by batch and status: the page never lists the members), the callbacks it
declares and the callback jobs its finishes enqueued. Whoever may view jobs may view
batches.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.contrib import admin
from django.contrib.auth import get_permission_codename
from django.core.exceptions import ValidationError
from django.db.models import Field, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import Batch, Job
from ..options import NAME_MAX_LENGTH
from ..redaction import may_see_secrets, redact
from ..statuses import BATCH_CALLBACKS, JobStatus
from . import composition, display, pictures
from .changelist import GuardedListAdmin, RefusedQuery
from .excerpts import shows_data
from .pagination import EstimatedCountPaginator
from .readonly import ReadOnlyAdmin
from .search import whole_number

SEARCH_HELP_TEXT = "A batch id, or part of its label."
PAYLOAD_EXCERPT_CHARS = 300


def batch_search(queryset: QuerySet, term: str) -> QuerySet:
    """A batch by id, or batches whose label contains the term (any case).

    Labels have no index: a label search reads the batch table (one row per batch, not
    per job), under the list's statement timeout. A term no label can hold (longer than a
    label, or text PostgreSQL cannot store) matches no label, and is not sent."""
    term = term.strip()
    if not term:
        return queryset
    condition = Q()
    number = whole_number(term)
    if number is not None:
        condition |= Q(pk=number)
    if len(term) <= NAME_MAX_LENGTH and _storable(term):
        condition |= Q(label__icontains=term)
    return queryset.filter(condition) if condition else queryset.none()


def _storable(text: str) -> bool:
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


class BatchStateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("open", "Open (members not finished)"), ("finished", "Finished")]

    def queryset(self, request: HttpRequest, queryset: QuerySet) -> QuerySet:
        finished = Q(sealed=True, pending=0)
        value = self.value()
        if value == "finished":
            return queryset.filter(finished)
        if value == "open":
            return queryset.exclude(finished)
        if value:
            raise RefusedQuery(f"Filter 'state' (state={value!r}): use open or finished")
        return queryset


@dataclass
class BatchPage:
    """What the batch page reads beyond the batch row."""

    by_status: dict[str, int] = field(default_factory=dict)
    callback_jobs: composition.Linked = field(default_factory=composition.Linked)
    shows_data: bool = False  # whether this user sees the callbacks' payloads
    shows_secrets: bool = False  # ... and their secret fields


_PAGE_ATTRIBUTE = "_pqjobs_batch_page"


def _page(batch: Batch) -> BatchPage:
    page = getattr(batch, _PAGE_ATTRIBUTE, None)
    return page if isinstance(page, BatchPage) else BatchPage()


def _may_view_jobs(request: HttpRequest) -> bool:
    opts = Job._meta
    return any(
        request.user.has_perm(f"{opts.app_label}.{get_permission_codename(action, opts)}")
        for action in ("view", "change")
    )


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin, GuardedListAdmin):
    list_display = [
        "id",
        "label_cell",
        "progress",
        "done",
        "failed",
        "cancelled",
        "finishes",
        "created",
        "finished",
    ]
    list_display_links = ["id", "label_cell"]
    list_filter = [BatchStateFilter]
    list_orderings = {"id": (["id"], ["-id"])}
    list_narrowing_hint = "Search for a batch id, or narrow it with the state filter."
    search_fields = ["=id"]  # shows the search box; the search itself is batch_search
    search_help_text = SEARCH_HELP_TEXT
    ordering = ["-id"]
    list_per_page = 50
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    actions = None
    change_form_template = "admin/django_pqjobs/batch/change_form.html"
    change_list_template = "admin/django_pqjobs/batch/change_list.html"
    fieldsets = [
        (None, {"fields": ["state", "progress", "counts", "created", "finished"]}),
        ("Members", {"fields": ["members"]}),
        ("Callbacks", {"fields": ["callbacks_declared", "callback_job_links"]}),
    ]

    # --- permissions: read-only; whoever may view jobs may view their batches -------------

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_view_permission(request, obj) or _may_view_jobs(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return super().has_module_permission(request) or _may_view_jobs(request)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(f) for _, spec in self.fieldsets for f in spec["fields"]]

    # --- the list ---------------------------------------------------------------------------

    def list_rows(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset.defer("callbacks")

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        return batch_search(queryset, search_term), False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return super().changelist_view(request, {"title": "Batches", **(extra_context or {})})

    @admin.display(description="label")
    def label_cell(self, batch: Batch) -> SafeString | str:
        return display.breakable(batch.label) if batch.label else "-"

    @admin.display(description="progress")
    def progress(self, batch: Batch) -> SafeString:
        if not batch.sealed:
            return format_html("filling: {} members so far", batch.total)
        return format_html(
            "{} {} / {} finished",
            display.batch_bar(batch.done, batch.failed, batch.cancelled, batch.total),
            batch.total - batch.pending,
            batch.total,
        )

    @admin.display(description="created")
    def created(self, batch: Batch) -> SafeString | str:
        return display.moment(batch.created_at)

    @admin.display(description="finished")
    def finished(self, batch: Batch) -> SafeString | str:
        return display.moment(batch.finished_at)

    # --- the batch page ---------------------------------------------------------------------

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Batch | None:
        """The batch, its members counted by status and its latest callback jobs."""
        rows = self.get_queryset(request)
        field_ = Batch._meta.get_field(from_field) if from_field else Batch._meta.pk
        if not isinstance(field_, Field):
            return None
        try:
            batch = rows.get(**{field_.name: field_.to_python(object_id)})
        except (Batch.DoesNotExist, ValidationError, ValueError):
            return None
        page = BatchPage(
            by_status=composition.members_by_status(rows.db, batch.pk),
            callback_jobs=composition.callback_jobs(rows.db, batch.pk),
            shows_data=shows_data(request),
            shows_secrets=may_see_secrets(request.user),
        )
        setattr(batch, _PAGE_ATTRIBUTE, page)
        return batch

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = {"title": "View batch", **(extra_context or {})}
        return super().change_view(request, object_id, form_url, extra)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        if isinstance(obj, Batch):
            page = _page(obj)
            context.update(
                pictures.batch_pictures(
                    obj.pk,
                    obj.label,
                    self.get_queryset(request).db,
                    sum(page.by_status.values()),
                    page.callback_jobs,
                )
            )
        return super().render_change_form(request, context, add, change, form_url, obj)

    @admin.display(description="state")
    def state(self, batch: Batch) -> SafeString | str:
        if not batch.sealed:
            return "filling: the transaction that enqueues its members has not ended"
        if batch.pending:
            text = f"open: {batch.pending} of {batch.total} members not finished"
            if batch.finishes:
                text += f" (reopened: it finished {batch.finishes} times before)"
            return text
        if batch.finishes <= 1:
            return format_html("finished once, at {}", display.moment(batch.finished_at))
        return format_html(
            "finished {} times (a Retry reopened it), last at {}",
            batch.finishes,
            display.moment(batch.finished_at),
        )

    @admin.display(description="counts")
    def counts(self, batch: Batch) -> str:
        return (
            f"{batch.total} members: {batch.done} done, {batch.failed} failed, "
            f"{batch.cancelled} cancelled (or deleted before they finished), "
            f"{batch.pending} not finished"
        )

    @admin.display(description="members now")
    def members(self, batch: Batch) -> SafeString:
        by_status = _page(batch).by_status
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    display.status_badge(status),
                    by_status.get(status, 0),
                    format_html(
                        '<a href="{}">list them</a>',
                        composition.job_list_url(batch__id__exact=batch.pk, status__exact=status),
                    )
                    if by_status.get(status)
                    else "",
                )
                for status in JobStatus.values
            ),
        )
        present = sum(by_status.values())
        gone = batch.total - present
        note = (
            format_html(
                '<p class="help">{} of its {} members are no longer in the job table '
                "(deleted, or pruned after they finished); the counts above still hold them.</p>",
                gone,
                batch.total,
            )
            if gone > 0
            else ""
        )
        return format_html(
            '<table class="pqjobs-members"><tbody>{}</tbody></table>'
            '<p><a href="{}">All {} members in the job list</a></p>{}',
            rows,
            composition.job_list_url(batch__id__exact=batch.pk),
            present,
            note,
        )

    @admin.display(description="declared")
    def callbacks_declared(self, batch: Batch) -> SafeString | str:
        declared = batch.callbacks if isinstance(batch.callbacks, dict) else {}
        page = _page(batch)
        show = page.shows_data
        rows = [
            (f"on {kind}", *_callback_spec(declared[kind], show, page.shows_secrets))
            for kind in BATCH_CALLBACKS
            if kind in declared
        ]
        if not rows:
            return "none"
        return format_html(
            '<div class="pqjobs-scroll"><table class="pqjobs-callbacks"><thead><tr>'
            "<th>when</th><th>job type</th><th>queue</th><th>payload</th></tr></thead>"
            "<tbody>{}</tbody></table></div>",
            format_html_join("", "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>", rows),
        )

    @admin.display(description="callback jobs enqueued")
    def callback_job_links(self, batch: Batch) -> SafeString | str:
        linked = _page(batch).callback_jobs
        if not linked.total:
            return "none yet" if batch.callbacks else "-"
        rows = format_html_join(
            "",
            '<tr><td><a href="{}">job {}</a></td><td>{}</td><td>{}</td></tr>',
            (
                (composition.job_url(j.id), j.id, j.job_type, display.status_badge(j.status or ""))
                for j in linked.jobs
            ),
        )
        more: SafeString | str = ""
        if linked.more > 0:
            more = format_html(
                '<p class="help">and {} earlier: <a href="{}">all of them in the job list</a></p>',
                f"more than {linked.more:,}" if linked.capped else f"{linked.more:,}",
                composition.job_list_url(callback_of__id__exact=batch.pk),
            )
        return format_html(
            '<div class="pqjobs-scroll"><table class="pqjobs-callback-jobs"><tbody>{}'
            "</tbody></table></div>{}",
            rows,
            more,
        )


def _callback_spec(
    spec: Any, show_data: bool, show_secrets: bool
) -> tuple[str, str, SafeString | str]:
    """A declared callback's job type, queue and payload excerpt (hidden without the data
    permission; its secrets masked without the secrets permission)."""
    if not isinstance(spec, dict):
        return "?", "?", "-"
    job_type, queue = str(spec.get("job_type", "?")), str(spec.get("queue", "?"))
    if not show_data:
        return job_type, queue, "hidden"
    payload = spec.get("payload")
    shown = payload if show_secrets else redact(payload)
    text = json.dumps(shown, ensure_ascii=False, sort_keys=True)
    if len(text) <= PAYLOAD_EXCERPT_CHARS:
        return job_type, queue, format_html("<code>{}</code>", text)
    return (
        job_type,
        queue,
        format_html(
            '<code>{}…</code> <span class="help">({} characters)</span>',
            text[:PAYLOAD_EXCERPT_CHARS],
            f"{len(text):,}",
        ),
    )
