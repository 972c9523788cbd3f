"""The operator's actions on jobs in the admin: the list's bulk actions (Retry, Cancel, Run
now, Skip, End wait, and a Delete that asks first and never deletes a running job), the job
page's Delete and its buttons (the same actions on one job), Release of a stuck attempt and
Send signal to a workflow. What each action does, and its message: ``actions.py``; each is
an operator action of ``operations.py`` recorded in the audit trail."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Count, QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.views.decorators.http import require_POST

from .. import operations
from ..conf import conf
from ..errors import InvalidJobOption, PayloadError
from ..models import Job, JobAttempt, JobQuerySet, Step, WorkerRecord
from ..printable import counted
from ..workflows import send_signal
from . import actions, display, excerpts
from .signal_form import SignalForm


class JobActions(admin.ModelAdmin):
    """The operator's actions on jobs and their pages (``JobAdmin``'s)."""

    actions = [
        "retry_action",
        "cancel_action",
        "run_now_action",
        "skip_action",
        "end_wait_action",
        "delete_action",
    ]

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django's bulk delete lists every selected job on its confirmation page (millions,
        # across a big list) and deletes running ones; delete_action does neither.
        # (Django 6.1 passes action_location and wants overrides to take it; 5.2 has none.)
        if action_location is None:
            found = super().get_actions(request)
        else:
            found = super().get_actions(request, action_location=action_location)  # type: ignore[call-arg]
        found.pop("delete_selected", None)
        return found

    # --- bulk actions --------------------------------------------------------------------------

    def _bulk(self, request: HttpRequest, queryset: QuerySet, name: str) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        action = actions.ACTIONS[name]
        changed = action.run(ids, actions.actor(request))
        level = messages.SUCCESS if changed else messages.WARNING
        self.message_user(request, action.report(changed, len(ids)), level)

    @admin.action(
        description="Retry selected jobs (failed / cancelled / expired)", permissions=["change"]
    )
    def retry_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "retry")

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "cancel")

    @admin.action(
        description="Run selected ready jobs now (first in the queue)", permissions=["change"]
    )
    def run_now_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "run-now")

    @admin.action(
        description="Skip selected failed jobs (a halted sequence goes on)",
        permissions=["change"],
    )
    def skip_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "skip")

    @admin.action(description="End the durable wait of selected workflows", permissions=["change"])
    def end_wait_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "end-wait")

    @admin.action(description="Delete selected jobs (not running)", permissions=["delete"])
    def delete_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """Asks first on a page that counts the selection by status (never lists it), then
        deletes all but the running jobs, in batches."""
        if request.POST.get("post") == "yes":
            result = actions.delete_selected(queryset, actions.actor(request))
            text = f"{counted(result.deleted, 'job')} deleted."
            if result.skipped:
                text += f" {result.skipped} skipped: running jobs are not deleted."
            level = messages.SUCCESS if result.deleted else messages.WARNING
            self.message_user(request, text, level)
            return None
        by_status = dict(
            queryset.order_by()
            .values_list("status")
            .annotate(n=Count("pk"))
            .values_list("status", "n")
        )
        context = {
            **self.admin_site.each_context(request),
            "title": "Delete jobs?",
            "opts": self.model._meta,
            "by_status": sorted(by_status.items()),
            "total": sum(by_status.values()),
            "running": by_status.get("running", 0),
            "doomed": sum(n for status, n in by_status.items() if status != "running"),
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "query_string": request.META.get("QUERY_STRING", ""),
        }
        return TemplateResponse(
            request, "admin/django_pqjobs/job/delete_selected_confirmation.html", context
        )

    # --- the job page's delete (one job, never a running one) -------------------------------

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        status = (
            self.get_queryset(request)
            .filter(pk=_pk(object_id))
            .values_list("status", flat=True)
            .first()
        )
        if status == "running":
            return self._back_to_job(
                request,
                object_id,
                f"Job {object_id} is running and is not deleted: cancel it (or release it, if "
                "its worker is stuck) first.",
                messages.ERROR,
            )
        return super().delete_view(request, object_id, extra_context)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """What the delete page says goes: the job and how many attempts of its history
        (counted, not listed: a job can have thousands)."""
        jobs = list(objs)
        ids = [job.pk for job in jobs]
        attempts = JobAttempt.objects.using(conf.DATABASE).filter(job_id__in=ids)
        count = attempts.count()
        listed: list[Any] = [
            format_html("Job {}: {} ({})", job.pk, job.job_type, job.status) for job in jobs
        ]
        if count:
            listed.append([f"{counted(count, 'attempt')} of its history"])
        model_count = {"jobs": len(jobs), "attempts of their history": count}
        perms_needed: set[str] = set()
        if not self.has_delete_permission(request):
            perms_needed.add("job")
        return listed, model_count, perms_needed, []

    def log_deletions(self, request: HttpRequest, queryset: Any) -> list[Any]:
        # The audit trail records every delete that happened (delete_model); Django's log
        # would be written before the delete and record a refused one too.
        return []

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        deleted = operations.delete_jobs([obj.pk], by=actions.actor(request), using=conf.DATABASE)
        if not deleted:
            request._pqjobs_delete_refused = True  # type: ignore[attr-defined]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        actions.delete_selected(queryset, actions.actor(request))

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        if getattr(request, "_pqjobs_delete_refused", False):
            return self._back_to_job(
                request,
                obj_id,
                f"Job {obj_id} was not deleted: a worker claimed it meanwhile, and running "
                "jobs are not deleted.",
                messages.ERROR,
            )
        return super().response_delete(request, obj_display, obj_id)

    # --- the job page's buttons, Release and Send signal ----------------------------------

    def _back_to_job(
        self, request: HttpRequest, job_id: Any, text: str, level: int = messages.INFO
    ) -> HttpResponse:
        """Say ``text`` on the job's page, and go back to it."""
        self.message_user(request, text, level)
        return HttpResponseRedirect(_change_url(job_id))

    def object_action(self, request: HttpRequest, job_id: int, action: str) -> HttpResponse:
        """The Retry / Cancel / Run now buttons of a job's page (POST, CSRF-protected)."""
        if action not in actions.ACTIONS:
            raise PermissionDenied
        return require_POST(self._object_action)(request, job_id, action)

    def _object_action(self, request: HttpRequest, job_id: int, action: str) -> HttpResponse:
        job = _job_or_404(self.get_queryset(request).only("pk"), pk=job_id)
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        changed = actions.ACTIONS[action].run([job.pk], actions.actor(request))
        level = messages.SUCCESS if changed else messages.WARNING
        text = actions.job_page_message(action, job.pk, bool(changed))
        return self._back_to_job(request, job.pk, text, level)

    def release_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        """Release one stuck running attempt: a page that shows what is released (GET), and
        the release itself (POST, with the attempt the page showed)."""
        job = _job_or_404(self.get_queryset(request).defer(*excerpts.BIG_COLUMNS), pk=job_id)
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        if request.method == "POST":
            try:
                attempt = int(request.POST.get("attempt", ""))
            except ValueError:
                attempt = -1
            worker_id = request.POST.get("worker", "")
            status = operations.release_job(
                job.pk,
                worker_id=worker_id,
                attempt=attempt,
                by=actions.actor(request),
                using=conf.DATABASE,
            )
            if status is None:
                return self._back_to_job(
                    request,
                    job.pk,
                    f"Job {job.pk} was not released: attempt {attempt} on worker "
                    f"{worker_id} is no longer running (it finished, or was rescued or "
                    "released meanwhile).",
                    messages.WARNING,
                )
            return self._back_to_job(
                request,
                job.pk,
                f"Job {job.pk}: attempt {attempt} on worker {worker_id} released, the job "
                f"is {status} now. Whatever that worker still records is ignored.",
                messages.SUCCESS,
            )
        if job.status != "running" or not job.locked_by:
            return self._back_to_job(
                request, job.pk, f"Job {job.pk} is {job.status}: only running jobs are released."
            )
        live = (
            WorkerRecord.objects.using(conf.DATABASE)
            .filter(worker_id=job.locked_by)
            .values_list("heartbeat_at", flat=True)
            .first()
        )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Release job {job.pk}?",
            "opts": self.model._meta,
            "job": job,
            "claimed": display.moment(job.locked_at),
            "heartbeat": display.moment(job.heartbeat_at),
            "worker_heartbeat": display.moment(live) if live else None,
            "stale_timeout": conf.STALE_TIMEOUT,
        }
        return TemplateResponse(request, "admin/django_pqjobs/job/release.html", context)

    def signal_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        """Send a workflow a signal (its ``ctx.wait_for_signal`` returns the payload): a
        form (GET), and the signal sent under the user's name (POST)."""
        job = _job_or_404(self.get_queryset(request).defer(*excerpts.BIG_COLUMNS), pk=job_id)
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        waiting_for = list(
            Step.objects.using(conf.DATABASE)
            .filter(job_id=job.pk, kind="signal", finished_at__isnull=True)
            .values_list("name", flat=True)
        )
        form = SignalForm(
            request.POST if request.method == "POST" else None,
            initial={"name": waiting_for[0]} if waiting_for else None,
        )
        if request.method == "POST" and form.is_valid():
            name, payload = form.cleaned_data["name"], form.cleaned_data["payload"]
            try:
                sent = send_signal(
                    job.pk, name, payload, by=actions.actor(request), using=conf.DATABASE
                )
            except (PayloadError, InvalidJobOption) as exc:
                form.add_error("payload", str(exc))
            else:
                text = (
                    f"Signal {name!r} sent to job {job.pk}."
                    if sent
                    else f"Job {job.pk} already had a signal {name!r}: the first one stands."
                )
                level = messages.SUCCESS if sent else messages.WARNING
                return self._back_to_job(request, job.pk, text, level)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Send job {job.pk} a signal",
            "opts": self.model._meta,
            "job": job,
            "form": form,
            "waiting_for": waiting_for,
        }
        return TemplateResponse(request, "admin/django_pqjobs/job/signal.html", context)


def _job_or_404(rows: QuerySet[Any], pk: int) -> Job:
    # Hot first: were an id ever held twice (the database refuses a given id,
    # sql/schema/history.sql; a superuser may still make one), the page shows the job still
    # to run rather than answering 500.
    try:
        return cast(JobQuerySet, rows).get_hot_first(pk=pk)
    except Job.DoesNotExist:
        raise Http404("no such job") from None


def _pk(object_id: Any) -> int | None:
    try:
        return int(object_id)
    except (TypeError, ValueError):
        return None


def _change_url(job_id: Any) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[job_id])
