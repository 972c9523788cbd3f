"""Admin for fair claiming (``fairness.py``): the weights of fair keys, a row per key whose
weight is not 1; saving or deleting one goes through ``fairness.set_fair_weight``, recorded
in the audit trail. Above the list, the fair keys with the most jobs waiting (read from
``PQJOBS["READ_DATABASE"]``, as the dashboard is), each linked to its weight."""

from __future__ import annotations

import math
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.utils import quote
from django.http import HttpRequest, HttpResponse
from django.urls import reverse
from django.utils.http import urlencode

from .. import fairness, monitoring
from ..conf import conf
from ..models import FairWeight, Job
from ..options import FAIR_WEIGHT_MAX
from . import display
from .actions import actor


class FairWeightForm(forms.ModelForm):
    weight = forms.IntegerField(
        min_value=1,
        max_value=FAIR_WEIGHT_MAX,
        help_text=f"1-{FAIR_WEIGHT_MAX}: turns its jobs take for each turn of a key weighing 1. "
        "It applies to the key's jobs enqueued from now on.",
    )

    class Meta:
        model = FairWeight
        fields = ["key", "weight"]
        help_texts = {
            "key": "The fair key as jobs carry it (tenant:7 for fair_key='tenant:{tenant_id}' "
            "and a payload with tenant_id 7).",
        }

    def clean_key(self) -> str:
        try:
            return fairness.fair_key(self.cleaned_data["key"], "the key")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(FairWeight)
class FairWeightAdmin(admin.ModelAdmin):
    form = FairWeightForm
    list_display = ["key", "weight", "set_by", "set_when"]
    set_when = display.moment_column("set_at", "set at")
    ordering = ["key"]
    search_fields = ["=key"]
    change_list_template = "admin/django_pqjobs/fairweight/change_list.html"

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(conf.DATABASE)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["key"] if obj is not None else []  # another key is another row

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        fairness.set_fair_weight(obj.key, obj.weight, by=actor(request), using=conf.DATABASE)

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        fairness.set_fair_weight(obj.key, None, by=actor(request), using=conf.DATABASE)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {"title": "Fair keys and their weights", **(extra_context or {})}
        if request.method in ("GET", "HEAD") and self._may_see_jobs(request):
            alias = conf.READ_DATABASE  # decides nothing: it may read a replica
            extra["fair_keys"] = busiest(alias, self.has_add_permission(request))
            extra["shown_keys"] = fairness.SHOWN_KEYS
            extra["read_from"] = alias
            extra["read_lag"] = monitoring.read_lag(alias)
        return super().changelist_view(request, extra)

    def _may_see_jobs(self, request: HttpRequest) -> bool:
        """The busiest keys are counts of jobs: shown to users who may see the jobs."""
        site = self.admin_site
        return site.is_registered(Job) and site.get_model_admin(Job).has_view_permission(request)


def busiest(alias: str, may_set: bool) -> list[dict[str, Any]]:
    """The fair keys with the most jobs waiting, as the page's table shows them: each with
    a link to set its weight (its row, or the add form with the key filled in)."""
    found = fairness.fair_keys(fairness.SHOWN_KEYS, using=alias)
    set_keys = set(
        FairWeight.objects.using(conf.DATABASE)
        .filter(key__in=[row.key for row in found])
        .values_list("key", flat=True)
    )
    rows = []
    for row in found:
        if row.key in set_keys:
            link = reverse("admin:django_pqjobs_fairweight_change", args=[quote(row.key)])
        elif may_set:
            query = urlencode({"key": row.key, "weight": str(row.weight)})
            link = f"{reverse('admin:django_pqjobs_fairweight_add')}?{query}"
        else:
            link = ""
        rows.append(
            {
                "key": row.key,
                "waiting": row.waiting,
                "running": row.running,
                "oldest_wait": _wait(row.oldest_wait),
                "weight": row.weight,
                "link": link,
            }
        )
    return rows


def _wait(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if not math.isfinite(seconds):  # a run_after written as '-infinity' behind our back
        return "forever"
    return display.duration(round(seconds * 1000))
