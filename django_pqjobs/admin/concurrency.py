"""Admin for live worker concurrency (``capacity.py``): a row per worker group, worker id
or ``*`` (every worker); saving or deleting one goes through ``capacity.set_concurrency``,
recorded in the audit trail, and running workers follow within a few seconds."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest, HttpResponse

from .. import capacity
from ..conf import conf
from ..models import ConcurrencySetting
from . import display
from .actions import actor


class ConcurrencyForm(forms.ModelForm):
    concurrency = forms.IntegerField(min_value=1, max_value=capacity.CONCURRENCY_MAX)

    class Meta:
        model = ConcurrencySetting
        fields = ["name", "concurrency"]
        help_texts = {
            "name": "A worker group (run_jobs --processes N --worker-id NAME), one worker id, "
            "or * for every worker. The most specific row applies to a worker.",
        }

    def clean_name(self) -> str:
        try:
            return capacity.target_name(self.cleaned_data["name"])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


@admin.register(ConcurrencySetting)
class ConcurrencySettingAdmin(admin.ModelAdmin):
    form = ConcurrencyForm
    list_display = ["name", "concurrency", "set_by", "set_when"]
    set_when = display.moment_column("set_at", "set at")
    ordering = ["name"]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {"title": "Worker concurrency", **(extra_context or {})}
        if request.method in ("GET", "HEAD"):
            extra["live_workers"] = capacity.effective(conf.DATABASE)
        return super().changelist_view(request, extra)

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).using(conf.DATABASE)

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return ["name"] if obj is not None else []  # another name is another row

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        capacity.set_concurrency(
            obj.concurrency, name=obj.name, by=actor(request), using=conf.DATABASE
        )

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        capacity.set_concurrency(None, name=obj.name, by=actor(request), using=conf.DATABASE)

    def delete_queryset(self, request: HttpRequest, queryset: Any) -> None:
        for obj in queryset:
            self.delete_model(request, obj)
