"""``manage.py resume_jobs``: resume paused queues or job types."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ...printable import counted, printable
from ._arguments import who
from ._base import PQJobsCommand
from ._pausing import add_targets, resume, targets, warn_if_undeclared


class Command(PQJobsCommand):
    help = "Resume paused queues or job types: their waiting jobs run again."

    def add_arguments(self, parser: CommandParser) -> None:
        add_targets(parser, "resume")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        wanted = targets(options)
        if not wanted:
            raise CommandError("name what to resume: --queue NAME and/or --job-type NAME")
        by = who(options)
        for kind, name in wanted:
            released = resume(alias, kind, name, by)
            if released is None:
                self.summary(f"{kind} {printable(name)} was not paused")
                warn_if_undeclared(self, alias, kind, name)
            else:
                self.summary(
                    f"{kind} {printable(name)} resumed ({counted(released, 'waiting job')} "
                    "released)"
                )
