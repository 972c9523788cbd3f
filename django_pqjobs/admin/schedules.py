"""Admin for recurring schedules: list with next/last run, validated form, next-run preview,
and the actions Enable, Disable and Run now (each recorded in the audit trail under the
user's name).

A schedule enqueues jobs, so deciding *what* it runs is enqueueing: creating a schedule,
changing its job type, payload, queue or priority, and Run now need the permission to add
jobs (``django_pqjobs.add_job``) besides the schedule's own. Without it a user who may
change schedules sees those fields read-only (a request that sends new values for them is
refused with the reason, nothing saved) and may still tune the timing, enable and disable.

The form holds a schedule to what ``enqueue_job`` accepts: a registered job type, a payload
within ``PQJOBS['PAYLOAD_MAX_BYTES']`` that PostgreSQL can store, queue and priority as
``options.py`` validates them (``scheduleform.py``). A row broken outside the form (a time
zone this server does not have, an interval or cron expression typed in by SQL) shows
``invalid: <reason>``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib import admin, messages
from django.db import transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.translation import ngettext

from .. import audit
from ..clock import database_now
from ..conf import conf
from ..errors import PQJobsError
from ..models import Job, Schedule
from ..recurrence import ScheduleError, Timing
from ..schedules.scheduler import set_enabled, trigger
from ..schedules.sync import timing_of
from ..statuses import AuditAction
from . import display
from .actions import actor
from .changelist import GuardedListAdmin
from .scheduleform import ScheduleForm

PREVIEW_RUNS = 5
# Deciding what a schedule runs is enqueueing jobs: the permission to add them.
ENQUEUE_PERMISSION = "django_pqjobs.add_job"


def _zone(tz_name: str | None) -> Any:
    """The schedule's zone; UTC when this server does not know it (the row says invalid)."""
    if not tz_name:
        return timezone.get_current_timezone()
    try:
        return ZoneInfo(tz_name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def _when(value: datetime | None, tz_name: str | None = None) -> str:
    """Absolute time in the schedule's zone (and UTC), with the relative time."""
    if value is None:
        return "-"
    try:
        local = value.astimezone(_zone(tz_name))
    except OverflowError:  # the zone's offset pushes it past the year 9999 (or before 1)
        local = value.astimezone(UTC)
    text = local.strftime("%Y-%m-%d %H:%M:%S %Z")
    if tz_name and local.utcoffset():
        text += value.astimezone(UTC).strftime(" = %H:%M:%S UTC")
    return f"{text} ({display.relative(value)})"


def _timing(obj: Schedule) -> Timing | str:
    """The row's timing, or why it has none (a row changed outside the form)."""
    try:
        return timing_of(obj)
    except ValueError as exc:  # ScheduleError, and what croniter raises on nonsense
        return f"invalid: {exc}"


@admin.register(Schedule)
class ScheduleAdmin(GuardedListAdmin):
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
    list_orderings = {
        "name": (["name"], ["-name"]),
        "job_type": (["job_type", "name"], ["-job_type", "-name"]),
        "timezone": (["timezone", "name"], ["-timezone", "-name"]),
        "enabled": (["enabled", "name"], ["-enabled", "-name"]),
        "next_run": (["next_run_at", "name"], ["-next_run_at", "-name"]),
        "last_run": (["last_run_at", "name"], ["-last_run_at", "-name"]),
    }
    actions = ["enable_schedules", "disable_schedules", "run_now"]
    readonly_fields = ["next_run", "next_runs_preview", "last_run", "declared_in_code"]
    fieldsets = [
        (None, {"fields": ["name", "job_type", "enabled"]}),
        ("When", {"fields": ["cron", "interval_seconds", "timezone", "next_runs_preview"]}),
        ("Job", {"fields": ["payload", "queue", "priority"]}),
        ("Policies", {"fields": ["overlap", "misfire"]}),
        ("State", {"fields": ["next_run", "last_run", "declared_in_code"]}),
    ]

    # --- permissions: what a schedule runs is enqueueing -----------------------------------

    def has_enqueue_permission(self, request: HttpRequest) -> bool:
        """May the user decide what schedules run?"""
        return bool(request.user.has_perm(ENQUEUE_PERMISSION))

    def has_run_permission(self, request: HttpRequest) -> bool:
        """May the user run schedules now (Run now)? (An action's permissions are any-of.)"""
        return self.has_change_permission(request) and self.has_enqueue_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return super().has_add_permission(request) and self.has_enqueue_permission(request)

    def get_form(
        self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any
    ) -> Any:
        form = super().get_form(request, obj, change, **kwargs)
        if self.has_enqueue_permission(request):
            return form
        return type(f"Locked{form.__name__}", (form,), {"may_enqueue": False})

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        status = Job.objects.filter(pk=OuterRef("last_job_id")).values("status")[:1]
        return super().get_queryset(request).annotate(last_job_status=Subquery(status))

    def list_rows(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        # The list shows neither; a payload typed in by SQL may be too deep to decode.
        return queryset.defer("payload", "declared")

    @admin.display(description="schedule")
    def timing(self, obj: Schedule) -> str:
        timing = _timing(obj)
        if isinstance(timing, str):
            return format_html("<strong>{}</strong>", timing)
        if timing.cron is not None:
            return format_html("<code>{}</code>", timing.cron)
        return format_html("every {} s", f"{timing.interval:g}")

    @admin.display(description="next run", ordering="next_run_at")
    def next_run(self, obj: Schedule) -> str:
        if not obj.enabled:
            return "paused"
        timing = _timing(obj)
        if isinstance(timing, str):
            return format_html("<strong>{}</strong>", timing)
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
        timing = _timing(obj)
        if isinstance(timing, str):
            return format_html("<strong>{}</strong>", timing)
        runs = [obj.next_run_at] if obj.enabled and obj.next_run_at is not None else []
        after = runs[-1] if runs else timezone.now()
        note = "" if obj.enabled else " (if enabled now)"
        try:
            runs += timing.upcoming(after, PREVIEW_RUNS - len(runs))
        except (OverflowError, ScheduleError):
            note += " (no later run before the year 9999)"
        items = format_html_join("", "<li>{}</li>", ((_when(r, obj.timezone),) for r in runs))
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
            count = _set_enabled(request, queryset, True)
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
        count = _set_enabled(request, queryset, False)
        self.message_user(
            request,
            ngettext("%d schedule disabled.", "%d schedules disabled.", count) % count,
            messages.SUCCESS,
        )

    @admin.action(description="Run selected schedules now", permissions=["run"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for pk, name in queryset.values_list("pk", "name"):
            try:
                with transaction.atomic(using=conf.DATABASE):
                    result = trigger(pk, conf.DATABASE)
                    audit.record(
                        conf.DATABASE,
                        AuditAction.SCHEDULE_RUN_NOW,
                        actor(request),
                        target=name,
                        detail=result.message,
                        schedule_id=pk,
                    )
            except PQJobsError as exc:  # a row changed outside the form: bad payload, queue...
                self.message_user(request, f"schedule {name!r}: not run: {exc}", messages.ERROR)
                continue
            level = messages.SUCCESS if result.job_id is not None else messages.WARNING
            self.message_user(request, result.message, level)


def _set_enabled(request: HttpRequest, queryset: QuerySet[Schedule], enabled: bool) -> int:
    """Enable or disable the selected schedules; record each one changed."""
    with transaction.atomic(using=conf.DATABASE):
        rows = (
            Schedule.objects.using(conf.DATABASE)
            .select_for_update()
            .filter(pk__in=queryset.values("pk"))
            .exclude(enabled=enabled)
            .values_list("pk", "name")
        )
        changing = list(rows)
        count = set_enabled([pk for pk, _ in changing], enabled, conf.DATABASE)
        action = AuditAction.SCHEDULE_ENABLE if enabled else AuditAction.SCHEDULE_DISABLE
        for pk, name in changing:
            audit.record(conf.DATABASE, action, actor(request), target=name, schedule_id=pk)
    return count
