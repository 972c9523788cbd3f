"""Syncing the schedules declared in code to the Schedule table (at worker start).

The rule, field by field: a schedule's row keeps what an operator set in the admin until
the *code* changes that same field. Each row stores the values the code last declared
(``Schedule.declared``); a sync writes a field only where the new declaration differs from
that snapshot. The timing fields (cron, interval, timezone) count as one: changing any of
them in code replaces all three. Schedules that disappear from the code are disabled, never
deleted (their history stays visible); schedules created in the admin are left alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from django.db import connections, transaction

from ..clock import database_now
from ..conf import conf
from ..models import Schedule
from ..recurrence import ScheduleError, ScheduleSpec, Timing
from ..registry import registry
from ..sql import queries

QUERIES = queries("schedules_sync")

logger = logging.getLogger("django_pqjobs")

SYNC_LOCK_KEY = 0x70716A5F73796E63  # "pqj_sync": one sync at a time across workers
TIMING_FIELDS = ("cron", "interval_seconds", "timezone")


@dataclass
class SyncResult:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    disabled: list[str] = field(default_factory=list)


def declared_specs() -> list[ScheduleSpec]:
    """Schedules from ``@job(cron=... / interval=...)`` and ``PQJOBS['SCHEDULES']``."""
    specs = [t.schedule for t in registry.all() if t.schedule is not None]
    seen = {spec.name for spec in specs}
    for spec in conf.SCHEDULES:
        if spec.name in seen:
            raise ScheduleError(
                f"schedule {spec.name!r} is declared both by @job and in PQJOBS['SCHEDULES']"
            )
        seen.add(spec.name)
        specs.append(spec)
    return specs


def timing_of(schedule: Schedule) -> Timing:
    """The validated timing of a row (raises :class:`ScheduleError` for a broken row)."""
    return Timing.build(schedule.cron or None, schedule.interval_seconds, schedule.timezone)


def sync_schedules(alias: str | None = None, specs: list[ScheduleSpec] | None = None) -> SyncResult:
    """Create, update and disable rows so the table matches the declarations."""
    alias = alias or conf.DATABASE
    specs = declared_specs() if specs is None else specs
    result = SyncResult()
    with transaction.atomic(using=alias):
        with connections[alias].cursor() as cursor:
            cursor.execute(QUERIES["sync_schedules"], [SYNC_LOCK_KEY])
        now = database_now(alias)
        rows = {s.name: s for s in Schedule.objects.using(alias).select_for_update()}
        for spec in specs:
            row = rows.get(spec.name)
            if row is None:
                _create(spec, now, alias)
                result.created.append(spec.name)
            elif _update(row, spec, now, alias):
                result.updated.append(spec.name)
        names = {spec.name for spec in specs}
        for row in rows.values():
            if no_longer_declared(row, names):
                row.enabled = False
                row.declared = {**(row.declared or {}), "enabled": False}
                row.updated_at = now
                row.save(using=alias, update_fields=["enabled", "declared", "updated_at"])
                result.disabled.append(row.name)
    for verb, names_done in (
        ("created", result.created),
        ("updated", result.updated),
        ("disabled (no longer declared)", result.disabled),
    ):
        if names_done:
            logger.info("schedules %s: %s", verb, ", ".join(names_done))
    return result


def declared_otherwise(row: Schedule, spec: ScheduleSpec) -> bool:
    """Whether the code declares ``row`` otherwise than at the last sync: the next sync
    writes the change."""
    return row.declared != spec.declared()


def no_longer_declared(row: Schedule, names: set[str]) -> bool:
    """Whether the next sync disables ``row``: the code declared it, enabled, and no longer
    declares it (``names``: the names declared now)."""
    return row.declared is not None and row.name not in names and bool(row.declared.get("enabled"))


def _create(spec: ScheduleSpec, now: Any, alias: str) -> None:
    declared = spec.declared()
    Schedule.objects.using(alias).create(
        name=spec.name,
        **declared,
        declared=declared,
        next_run_at=spec.timing.next_after(now) if spec.enabled else None,
    )


def _update(row: Schedule, spec: ScheduleSpec, now: Any, alias: str) -> bool:
    declared = spec.declared()
    # An admin-created row that the code now declares: the code takes over every field.
    previous = row.declared if row.declared is not None else {}
    changed = {
        key for key, value in declared.items() if key not in previous or previous[key] != value
    }
    if changed & set(TIMING_FIELDS):
        changed |= set(TIMING_FIELDS)
    if not changed and row.declared == declared:
        return False
    was_enabled = row.enabled
    old_timing = (row.cron, row.interval_seconds, row.timezone)
    for key in changed:
        setattr(row, key, declared[key])
    row.declared = declared
    if row.enabled and (
        not was_enabled
        or row.next_run_at is None
        or old_timing != (row.cron, row.interval_seconds, row.timezone)
    ):
        row.next_run_at = timing_of(row).next_after(now)
    row.updated_at = now
    row.save(using=alias)
    return bool(changed)
