"""The job page: which fields it shows (only the rows that apply, the first screen answering
the job's status: ``firstscreen.plan``), the job read for it without its big columns and
with the facts its fields show (``jobfacts.py``), and its refusal to write: the page is
read-only and refuses POST (a job changes only through the operator's actions,
``jobactions.py``). The fields themselves: ``jobfields.py`` and ``jobrecord.py``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Field
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed

from ..conf import conf
from ..models import Job, JobQuerySet
from ..redaction import may_see_secrets
from . import composition, excerpts, firstscreen, jobfacts, pictures


class JobPage(admin.ModelAdmin):
    """The job page (``JobAdmin``'s change view, read-only)."""

    change_form_template = "admin/django_pqjobs/job/change_form.html"

    fieldsets = [
        (
            None,
            {
                "fields": [
                    "status_detail",
                    "job_type",
                    "queue",
                    "priority",
                    "tries",
                    "dedupe_key",
                    "key_held",
                    "sequence",
                    "fair",
                    "why_waiting",
                    "links",
                ]
            },
        ),
        (
            "Payload and result",
            {"fields": ["payload_pretty", "payload_shape", "result_pretty", "progress_bar"]},
        ),
        (
            "Timing",
            {
                "fields": [
                    "created",
                    "due",
                    "deadline",
                    "claimed",
                    "worker",
                    "heartbeat",
                    "finished",
                    "duration",
                    "timeout_seconds",
                    "cancel_requested",
                ]
            },
        ),
        ("Timeline", {"fields": ["timeline"]}),
        ("Errors", {"fields": ["attempt_table", "tracebacks"]}),
    ]
    # The job's batch and dependencies: a fieldset shown only with the rows that apply.
    composition_fields = ["member_of", "callback_of_batch", "dependency_links", "dependent_links"]
    # What replaces the job's data for staff without ADMIN_DATA_PERMISSION.
    hidden_data_fields = {
        "payload_pretty": "data_hidden",
        "result_pretty": None,
        "tracebacks": None,
    }

    if TYPE_CHECKING:

        def shows_data(self, request: HttpRequest) -> bool: ...

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """Only the rows that apply, the first screen answering the job's status
        (``firstscreen.plan``)."""
        if isinstance(obj, Job):
            return firstscreen.plan(obj, jobfacts.facts_of(obj))
        fieldsets: list[Any] = list(self.fieldsets)
        if not self.shows_data(request):
            hidden = self.hidden_data_fields
            fieldsets = []
            for name, spec in self.fieldsets:
                names = [hidden.get(str(f), str(f)) for f in spec["fields"]]
                fieldsets.append((name, {**spec, "fields": [f for f in names if f]}))
        return fieldsets

    def _composition_fields(self, job: Any) -> list[str]:
        if not isinstance(job, Job):
            return []
        links = composition.links_of(job)
        present = {
            "member_of": links.batch is not None,
            "callback_of_batch": links.callback_of is not None,
            "dependency_links": links.dependencies.total > 0,
            "dependent_links": links.dependents.total > 0,
        }
        return [name for name in self.composition_fields if present[name]]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return [f for _, spec in self.get_fieldsets(request, obj) for f in spec["fields"]]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(f) for f in self.get_fields(request, obj)]

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Job | None:
        """The job of the job page, without its big columns, and their excerpts."""
        rows = self.get_queryset(request).defer(*excerpts.BIG_COLUMNS)
        field = Job._meta.get_field(from_field) if from_field else Job._meta.pk
        if not isinstance(field, Field):
            return None
        try:
            job = cast(JobQuerySet, rows).get_hot_first(**{field.name: field.to_python(object_id)})
        except (Job.DoesNotExist, ValidationError, ValueError):
            return None
        excerpts.attach(
            job,
            excerpts.load_page(
                rows.db, job.pk, self.shows_data(request), may_see_secrets(request.user)
            ),
        )
        composition.attach(job, composition.load_job_links(rows.db, job))
        jobfacts.attach_facts(job, rows.db, self._composition_fields(job))
        setattr(job, jobfacts.CAN_ACT, self.has_change_permission(request, job))
        return job

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The page shows a job; it never writes one back. A save would put the whole row
        # as read back over whatever a worker recorded meanwhile.
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(
                ["GET", "HEAD"],
                content="The job page is read-only: change a job with Retry, Cancel, Run "
                "now, Release or Delete.",
            )
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        raise PermissionDenied("jobs change only through the Retry, Cancel and Run now actions")

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        extra["can_act"] = self.has_change_permission(request)
        extra["title"] = "View job"
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
        context["can_delete_job"] = obj is not None and self.has_delete_permission(request, obj)
        if isinstance(obj, Job):
            context.update(pictures.job_pictures(obj, conf.DATABASE))
        return super().render_change_form(request, context, add, change, form_url, obj)
