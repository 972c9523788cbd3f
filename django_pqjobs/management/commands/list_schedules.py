"""``manage.py list_schedules``: every schedule with its timing and next runs, and what the
next sync of the schedules declared in code would change."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from django.core.management.base import CommandError, CommandParser

from ...clock import database_now
from ...errors import UnknownJobType
from ...models import Schedule
from ...printable import counted, one_line, printable
from ...recurrence import ScheduleError
from ...redaction import redact
from ...schedules.scheduler import job_of
from ...schedules.sync import (
    declared_otherwise,
    declared_specs,
    no_longer_declared,
    sync_schedules,
    timing_of,
)
from ._base import PQJobsCommand, iso

# Schedules declared in code reach the table when a worker starts; until then, this says so.
SYNCED_BY = "when a worker starts (or list_schedules --sync)"


class Command(PQJobsCommand):
    help = (
        "List the schedules (recurring jobs) with their timing, time zone and next runs in "
        "that time zone (-v 2: also the queue and priority their jobs get, and their "
        "payload). Schedules declared in code reach the table when a worker starts; the list "
        "says which are not there yet or differ, and --sync writes them now."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--next", type=int, default=3, help="how many upcoming runs to show (default 3)"
        )
        parser.add_argument(
            "--sync",
            action="store_true",
            help="first sync the schedules declared in code to the table, as a worker does "
            "when it starts",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        count = max(1, options["next"])
        try:
            specs = {spec.name: spec for spec in declared_specs()}
            if options["sync"]:
                self._sync(alias)
        except ScheduleError as exc:
            raise CommandError(f"the schedules declared in code are invalid: {exc}") from None
        now = database_now(alias)
        schedules = list(Schedule.objects.using(alias).order_by("name"))
        if not schedules and not specs:
            self.summary("no schedules (none in the table, none declared in code)")
            return
        for schedule in schedules:
            self._show(schedule, count, now)
            spec = specs.get(schedule.name)
            if spec is not None and declared_otherwise(schedule, spec):
                self.summary(f"    the code declares it otherwise: synced {SYNCED_BY}")
            elif spec is None and no_longer_declared(schedule, set(specs)):
                self.summary(f"    no longer declared in code: disabled {SYNCED_BY}")
        listed = {schedule.name for schedule in schedules}
        for spec in specs.values():
            if spec.name not in listed:
                self.summary(
                    printable(
                        f"{spec.name}  job={spec.job_type}  "
                        f"{_when(spec.timing.cron, spec.timing.interval)}  "
                        f"tz={spec.timing.timezone}  declared in code, not in the table yet: "
                        f"created {SYNCED_BY}"
                    )
                )

    def _sync(self, alias: str) -> None:
        result = sync_schedules(alias)
        changes = [
            f"{counted(len(names), 'schedule')} {verb} ({', '.join(names)})"
            for verb, names in (
                ("created", result.created),
                ("updated", result.updated),
                ("disabled", result.disabled),
            )
            if names
        ]
        self.summary(printable(f"synced: {'; '.join(changes) or 'nothing to change'}"))

    def _show(self, schedule: Schedule, count: int, now: datetime) -> None:
        state = "enabled" if schedule.enabled else "disabled"
        self.summary(
            printable(
                f"{schedule.name}  job={schedule.job_type}  "
                f"{_when(schedule.cron, schedule.interval_seconds)}  tz={schedule.timezone}  "
                f"{state}  overlap={schedule.overlap}  misfire={schedule.misfire}"
            )
        )
        self.detail(printable(f"    {_job_fields(schedule)}"))
        try:
            timing = timing_of(schedule)
        except ScheduleError as exc:
            self.summary(printable(f"    INVALID: {exc}"))
            return
        if schedule.enabled and schedule.next_run_at is not None:
            runs = [schedule.next_run_at, *timing.upcoming(schedule.next_run_at, count - 1)]
        else:
            runs = timing.upcoming(now, count) if schedule.enabled else []
        zone = ZoneInfo(timing.timezone)
        for run in runs:
            self.summary(f"    next: {iso(run.astimezone(zone))}")
        if schedule.last_run_at is not None:
            last = iso(schedule.last_run_at.astimezone(zone))
            self.summary(f"    last: {last} (job {schedule.last_job_id})")


def _when(cron: str | None, interval: float | None) -> str:
    return f"cron {cron!r}" if cron else f"every {interval:g} s"


def _job_fields(schedule: Schedule) -> str:
    """The queue and priority its jobs get (its own, else the job type's, else PQJOBS'),
    and its payload (secret fields masked: the output ends up in terminals and logs)."""
    payload = f"payload={json.dumps(redact(schedule.payload), sort_keys=True)}"
    try:
        job = job_of(schedule)
    except UnknownJobType:
        queue = schedule.queue or "(the job type's)"
        priority = "(the job type's)" if schedule.priority is None else schedule.priority
        return f"queue={queue}  priority={priority}  {payload}  (job type not registered here)"
    except Exception as exc:  # what the scheduler would meet when it fires: shown, not raised
        return f"{payload}  cannot enqueue: {one_line(f'{type(exc).__name__}: {exc}')}"
    return f"queue={job.queue}  priority={job.priority}  {payload}"
