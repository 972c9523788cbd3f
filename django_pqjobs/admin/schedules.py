"""Admin for recurring schedules: list with next/last run, validated form, next-run preview,
and the actions Enable, Disable and Run now (which need the change permission)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import ngettext

from ..clock import database_now
from ..conf import conf
from ..models import Job, Schedule
from ..schedules.scheduler import set_enabled, trigger
from ..schedules.sync import timing_of
from ..schedules.timing import (
    ScheduleError,
    validate_cron,
    validate_interval,
    validate_timezone,
)

PREVIEW_RUNS = 5


class ScheduleForm(forms.ModelForm):
    class Meta:
        model = Schedule
        fields = [
            "name",
            "job_type",
            "cron",
            "interval_seconds",
            "timezone",
            "payload",
            "queue",
            "priority",
            "enabled",
            "overlap",
            "misfire",
        ]

    def clean_cron(self) -> str:
        value = (self.cleaned_data.get("cron") or "").strip()
        if not value:
            return ""
        try:
            return validate_cron(value)
        except ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_interval_seconds(self) -> float | None:
        value = self.cleaned_data.get("interval_seconds")
        if value is None:
            return None
        try:
            return validate_interval(value)
        except ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean_timezone(self) -> str:
        value = (self.cleaned_data.get("timezone") or "").strip()
        try:
            return validate_timezone(value)
        except ScheduleError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        if "cron" in self.errors or "interval_seconds" in self.errors:
            return cleaned
        has_cron = bool(cleaned.get("cron"))
        has_interval = cleaned.get("interval_seconds") is not None
        if has_cron and has_interval:
            self.add_error(
                "cron", "Give either a cron expression or an interval, not both: clear one."
            )
        elif not has_cron and not has_interval:
            self.add_error(
                "cron", "Give a cron expression (e.g. '0 3 * * *') or an interval in seconds."
            )
        return cleaned


def _when(value: datetime | None, tz_name: str | None = None) -> str:
    """Absolute time in the schedule's zone (and UTC), with the relative time."""
    if value is None:
        return "-"
    zone = ZoneInfo(tz_name) if tz_name else timezone.get_current_timezone()
    local = value.astimezone(zone)
    text = local.strftime("%Y-%m-%d %H:%M:%S %Z")
    if tz_name and local.utcoffset():
        text += value.astimezone(ZoneInfo("UTC")).strftime(" (%H:%M:%S UTC)")
    now = timezone.now()
    if abs((value - now).total_seconds()) < 60:
        relative = "within a minute" if value > now else "just now"
    else:
        relative = f"in {timeuntil(value, now)}" if value > now else f"{timesince(value, now)} ago"
    return f"{text}, {relative}"


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    form = ScheduleForm
    list_display = [
        "name",
        "job_type",
        "timing",
        "timezone",
        "enabled",
        "next_run",
        "last_run",
    ]
    list_filter = ["enabled", "overlap", "misfire"]
    search_fields = ["name", "job_type"]
    ordering = ["name"]
    actions = ["enable_schedules", "disable_schedules", "run_now"]
    readonly_fields = ["next_run", "next_runs_preview", "last_run", "declared_in_code"]
    fieldsets = [
        (None, {"fields": ["name", "job_type", "enabled"]}),
        ("When", {"fields": ["cron", "interval_seconds", "timezone", "next_runs_preview"]}),
        ("Job", {"fields": ["payload", "queue", "priority"]}),
        ("Policies", {"fields": ["overlap", "misfire"]}),
        ("State", {"fields": ["next_run", "last_run", "declared_in_code"]}),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        status = Job.objects.filter(pk=OuterRef("last_job_id")).values("status")[:1]
        return super().get_queryset(request).annotate(last_job_status=Subquery(status))

    @admin.display(description="schedule")
    def timing(self, obj: Schedule) -> str:
        if obj.cron:
            return format_html("<code>{}</code>", obj.cron)
        return format_html("every {} s", f"{obj.interval_seconds:g}")

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: Schedule) -> str:
        if not obj.enabled:
            return "paused"
        return _when(obj.next_run_at, obj.timezone)

    @admin.display(description="last run", ordering="last_run_at")
    def last_run(self, obj: Schedule) -> str:
        if obj.last_run_at is None:
            return "never"
        status = getattr(obj, "last_job_status", None)
        if obj.last_job_id is None:
            return _when(obj.last_run_at, obj.timezone)
        return format_html(
            "{} &mdash; job {} ({})",
            _when(obj.last_run_at, obj.timezone),
            obj.last_job_id,
            status or "pruned",
        )

    @admin.display(description="next runs")
    def next_runs_preview(self, obj: Schedule) -> str:
        if obj.pk is None:
            return "Save the schedule to see its next runs."
        try:
            timing = timing_of(obj)
        except ScheduleError as exc:
            return format_html("<strong>invalid: {}</strong>", str(exc))
        if obj.enabled and obj.next_run_at is not None:
            runs = [obj.next_run_at, *timing.upcoming(obj.next_run_at, PREVIEW_RUNS - 1)]
        else:
            runs = timing.upcoming(timezone.now(), PREVIEW_RUNS)
        items = format_html_join("", "<li>{}</li>", ((_when(r, obj.timezone),) for r in runs))
        note = "" if obj.enabled else " (if enabled now)"
        return format_html("<ol>{}</ol>{}", items, note)

    @admin.display(description="declared in code", boolean=True)
    def declared_in_code(self, obj: Schedule) -> bool:
        return obj.declared is not None

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        now = database_now(conf.DATABASE)
        timing_fields = {"cron", "interval_seconds", "timezone", "enabled"}
        recompute = obj.enabled and (
            not change or obj.next_run_at is None or bool(timing_fields & set(form.changed_data))
        )
        if recompute:
            obj.next_run_at = timing_of(obj).next_after(now)
        obj.updated_at = now
        if not change:
            obj.save()
            return
        # Write only what the form changed: a full save would put back the next_run_at /
        # last_job read when the page was opened, undoing a run fired meanwhile (which
        # would then fire a second time).
        fields = [*form.changed_data, "updated_at"] + (["next_run_at"] if recompute else [])
        obj.save(update_fields=fields)

    @admin.action(description="Enable selected schedules", permissions=["change"])
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        try:
            count = set_enabled(list(queryset.values_list("pk", flat=True)), True, conf.DATABASE)
        except ScheduleError as exc:
            self.message_user(request, f"Nothing enabled: {exc}", messages.ERROR)
            return
        self.message_user(
            request,
            ngettext("%d schedule enabled.", "%d schedules enabled.", count) % count,
            messages.SUCCESS,
        )

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = set_enabled(list(queryset.values_list("pk", flat=True)), False, conf.DATABASE)
        self.message_user(
            request,
            ngettext("%d schedule disabled.", "%d schedules disabled.", count) % count,
            messages.SUCCESS,
        )

    @admin.action(description="Run selected schedules now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for pk in queryset.values_list("pk", flat=True):
            result = trigger(pk, conf.DATABASE)
            level = messages.SUCCESS if result.job_id is not None else messages.WARNING
            self.message_user(request, result.message, level)
