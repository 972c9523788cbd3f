"""``manage.py trigger_schedule NAME``: enqueue one run of a schedule now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...conf import conf
from ...models import Schedule
from ...schedules.scheduler import trigger


class Command(BaseCommand):
    help = (
        "Enqueue one run of the named schedule now (its next scheduled run is unchanged). "
        "With the overlap policy 'skip' nothing is enqueued while its last job is active."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the schedule's name (see list_schedules)")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = conf.DATABASE
        name = options["name"]
        pk = Schedule.objects.using(alias).filter(name=name).values_list("pk", flat=True).first()
        if pk is None:
            known = ", ".join(Schedule.objects.using(alias).values_list("name", flat=True)[:20])
            raise CommandError(f"no schedule named {name!r} (known: {known or 'none'})")
        result = trigger(pk, alias)
        if result.job_id is None:
            raise CommandError(result.message)
        self.stdout.write(result.message)
