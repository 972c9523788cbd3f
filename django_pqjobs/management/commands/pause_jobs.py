"""``manage.py pause_jobs``: pause queues or job types, or list what is paused."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...flow import paused, undeclared
from ...printable import printable
from ._arguments import who
from ._base import PQJobsCommand, iso
from ._pausing import add_targets, pause, targets


class Command(PQJobsCommand):
    help = (
        "Pause queues or job types: every worker stops starting their jobs within about a "
        "second (running jobs finish, waiting jobs stay) until resume_jobs. Without "
        "--queue/--job-type, list what is paused."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        add_targets(parser, "pause")
        parser.add_argument(
            "--new",
            action="store_true",
            help="pause names nothing declares yet (without it, such a name is refused as a "
            "likely typo)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        wanted = targets(options)
        if not wanted:
            found = paused(alias)
            for item in found:
                self.summary(
                    f"{item.kind} {printable(item.name)}: paused since "
                    f"{iso(item.paused_at)}"
                    + (f" by {printable(item.paused_by)}" if item.paused_by else "")
                )
            if not found:
                self.summary("nothing is paused")
            return
        by = who(options)
        unknown = {
            (kind, name): why for kind, name in wanted if (why := undeclared(kind, name, alias))
        }
        if unknown and not options["new"]:
            raise CommandError(
                "; ".join(printable(why) for why in unknown.values())
                + ". Nothing was paused: pass --new to pause a name nothing declares yet"
            )
        for kind, name in wanted:
            if (kind, name) in unknown:
                self.warning(printable(unknown[kind, name]))
            if pause(alias, kind, name, by):
                self.summary(f"{kind} {printable(name)} paused")
            else:
                self.summary(f"{kind} {printable(name)} was paused already")
