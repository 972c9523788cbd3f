"""``manage.py list_schedules``: every schedule with its timing and next runs."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...clock import database_now
from ...conf import conf
from ...models import Schedule
from ...schedules.sync import timing_of
from ...schedules.timing import ScheduleError


class Command(BaseCommand):
    help = "List the schedules (recurring jobs) with their timing, time zone and next runs."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--next", type=int, default=3, help="how many upcoming runs to show (default 3)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = conf.DATABASE
        count = max(1, options["next"])
        now = database_now(alias)
        schedules = list(Schedule.objects.using(alias).order_by("name"))
        if not schedules:
            self.stdout.write("no schedules")
            return
        for schedule in schedules:
            when = (
                f"cron {schedule.cron!r}"
                if schedule.cron
                else f"every {schedule.interval_seconds:g} s"
            )
            state = "enabled" if schedule.enabled else "disabled"
            self.stdout.write(
                f"{schedule.name}  job={schedule.job_type}  {when}  tz={schedule.timezone}  "
                f"{state}  overlap={schedule.overlap}  misfire={schedule.misfire}"
            )
            try:
                timing = timing_of(schedule)
            except ScheduleError as exc:
                self.stdout.write(f"    INVALID: {exc}")
                continue
            if schedule.enabled and schedule.next_run_at is not None:
                runs = [schedule.next_run_at, *timing.upcoming(schedule.next_run_at, count - 1)]
            else:
                runs = timing.upcoming(now, count) if schedule.enabled else []
            for run in runs:
                self.stdout.write(f"    next: {run.isoformat()}")
            if schedule.last_run_at is not None:
                self.stdout.write(
                    f"    last: {schedule.last_run_at.isoformat()} (job {schedule.last_job_id})"
                )
