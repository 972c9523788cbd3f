"""``manage.py list_schedules``: every schedule with its timing and next runs."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import CommandParser

from ...clock import database_now
from ...models import Schedule
from ...printable import printable
from ...recurrence import ScheduleError
from ...schedules.sync import timing_of
from ._base import PQJobsCommand


class Command(PQJobsCommand):
    help = (
        "List the schedules (recurring jobs) with their timing, time zone and next runs "
        "(-v 2: also their queue, priority and payload)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--next", type=int, default=3, help="how many upcoming runs to show (default 3)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        count = max(1, options["next"])
        now = database_now(alias)
        schedules = list(Schedule.objects.using(alias).order_by("name"))
        if not schedules:
            self.summary("no schedules")
            return
        for schedule in schedules:
            when = (
                f"cron {schedule.cron!r}"
                if schedule.cron
                else f"every {schedule.interval_seconds:g} s"
            )
            state = "enabled" if schedule.enabled else "disabled"
            self.summary(
                printable(
                    f"{schedule.name}  job={schedule.job_type}  {when}  tz={schedule.timezone}  "
                    f"{state}  overlap={schedule.overlap}  misfire={schedule.misfire}"
                )
            )
            queue = schedule.queue or "(the job type's)"
            priority = "(the job type's)" if schedule.priority is None else schedule.priority
            self.detail(
                printable(
                    f"    queue={queue}  priority={priority}  "
                    f"payload={json.dumps(schedule.payload, sort_keys=True)}"
                )
            )
            try:
                timing = timing_of(schedule)
            except ScheduleError as exc:
                self.summary(printable(f"    INVALID: {exc}"))
                continue
            if schedule.enabled and schedule.next_run_at is not None:
                runs = [schedule.next_run_at, *timing.upcoming(schedule.next_run_at, count - 1)]
            else:
                runs = timing.upcoming(now, count) if schedule.enabled else []
            for run in runs:
                self.summary(f"    next: {run.isoformat()}")
            if schedule.last_run_at is not None:
                self.summary(
                    f"    last: {schedule.last_run_at.isoformat()} (job {schedule.last_job_id})"
                )
