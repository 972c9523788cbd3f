"""``manage.py trigger_schedule NAME``: enqueue one run of a schedule now."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import transaction

from ... import audit
from ...models import Schedule
from ...printable import printable
from ...schedules.scheduler import trigger
from ...statuses import AuditAction
from ._arguments import add_by, who
from ._base import PQJobsCommand


class Command(PQJobsCommand):
    help = (
        "Enqueue one run of the named schedule now (its next scheduled run is unchanged). "
        "With the overlap policy 'skip' nothing is enqueued while its last job is active."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="the schedule's name (see list_schedules)")
        add_by(parser, "run")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        name = options["name"]
        pk = Schedule.objects.using(alias).filter(name=name).values_list("pk", flat=True).first()
        if pk is None:
            names = Schedule.objects.using(alias).values_list("name", flat=True)[:20]
            known = ", ".join(printable(known) for known in names)
            raise CommandError(f"no schedule named {name!r} (known: {known or 'none'})")
        with transaction.atomic(using=alias):
            result = trigger(pk, alias)
            audit.record(
                alias,
                AuditAction.SCHEDULE_RUN_NOW,
                who(options),
                target=name,
                detail=result.message,
                schedule_id=pk,
            )
        if result.job_id is None:
            raise CommandError(printable(result.message))
        self.summary(printable(result.message))
