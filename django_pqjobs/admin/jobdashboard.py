"""The job queue's dashboard page (``dashboard.py`` gathers its numbers, ``pictures.py`` its
graphs, ``flowcontrol.py`` its flow control) with its Pause and Resume buttons, and its
entry in the admin's index (``DashboardAdmin``)."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.views.decorators.http import require_POST

from .. import flow, monitoring
from ..conf import conf
from ..models import Dashboard, FairWeight, Job
from . import actions, dashboard, flowcontrol, pictures
from .readonly import ReadOnlyAdmin


class JobDashboard(admin.ModelAdmin):
    """The dashboard's views (``JobAdmin``'s): the page, and Pause / Resume."""

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        alias = conf.READ_DATABASE  # the dashboard decides nothing: it may read a replica
        paused = flow.paused(alias)
        numbers = dashboard.collect(alias, frozenset(p.name for p in paused if p.kind == "queue"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Job queue dashboard",
            "opts": self.model._meta,
            "dashboard": numbers,
            "flow": flowcontrol.collect(
                alias, paused, sorted({a["queue"] for a in numbers.active})
            ),
            "paused": flowcontrol.paused_rows(paused),
            "can_change": self.has_change_permission(request),
            "pause_kinds": list(flowcontrol.KINDS.items()),
            "fair_keys_url": self._fair_keys_url(request),
            "stale_timeout": conf.STALE_TIMEOUT,
            "live_after": monitoring.live_after(),
            **pictures.dashboard_pictures(
                numbers.active, reverse("admin:django_pqjobs_job_changelist")
            ),
        }
        return TemplateResponse(request, "admin/django_pqjobs/job/dashboard.html", context)

    def _fair_keys_url(self, request: HttpRequest) -> str | None:
        """The Fair keys page (the weights' list), for users who may see it."""
        site = self.admin_site
        if not site.is_registered(FairWeight):
            return None
        if not site.get_model_admin(FairWeight).has_view_permission(request):
            return None
        return reverse(f"{site.name}:django_pqjobs_fairweight_changelist")

    def pause_view(self, request: HttpRequest, verb: str) -> HttpResponse:
        """The dashboard's Pause and Resume buttons (POST, CSRF-protected, change
        permission)."""
        if verb not in ("pause", "resume"):
            raise PermissionDenied
        return require_POST(self._pause)(request, verb)

    def _pause(self, request: HttpRequest, verb: str) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        text, level = flowcontrol.pause_or_resume(request, verb == "pause", actions.actor(request))
        self.message_user(request, text, level)
        return HttpResponseRedirect(reverse("admin:django_pqjobs_job_dashboard"))


@admin.register(Dashboard)
class DashboardAdmin(ReadOnlyAdmin):
    """The dashboard's entry in the admin's index and navigation sidebar (``Dashboard``, a
    proxy of Job): its one page is the dashboard, shown to whoever may view jobs."""

    def _jobs(self) -> JobDashboard:
        return cast(JobDashboard, self.admin_site.get_model_admin(Job))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._jobs().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and self._jobs().has_view_permission(request)

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="django_pqjobs_dashboard_changelist",
            )
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self._jobs().dashboard_view(request)
