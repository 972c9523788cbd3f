"""``manage.py set_concurrency``: change how many jobs running workers run at once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ... import capacity
from ...printable import printable
from ._arguments import add_by, who
from ._base import PQJobsCommand


class Command(PQJobsCommand):
    help = (
        "Set how many jobs at once the running workers of a worker group (run_jobs "
        "--processes N --worker-id NAME), of one worker id, or of every worker run, without "
        "restarting them: they follow within a few seconds, each within 1 and its "
        "--max-concurrency. Without a number, list what is set."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "concurrency", nargs="?", type=int, default=None, help="jobs at once (1-1024)"
        )
        parser.add_argument(
            "--workers",
            "-w",
            default=capacity.EVERY_WORKER,
            metavar="NAME",
            help="a worker group or worker id (default: '*', every worker)",
        )
        parser.add_argument(
            "--clear",
            action="store_true",
            help="take the setting of --workers away: they go back to their own concurrency",
        )
        add_by(parser, "setting")

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        concurrency, clear = options["concurrency"], options["clear"]
        try:
            name = capacity.target_name(options["workers"])
        except ValueError as exc:
            raise CommandError(f"--workers: {exc}") from None
        if concurrency is None and not clear:
            found = capacity.settings(alias)
            for setting in found:
                who_set = f" by {printable(setting.set_by)}" if setting.set_by else ""
                self.summary(
                    f"{printable(setting.name)}: {setting.concurrency} at once (set "
                    f"{setting.set_at.isoformat()}{who_set})"
                )
            if not found:
                self.summary("no concurrency is set: every worker runs at its own")
            return
        if concurrency is not None and clear:
            raise CommandError("give a concurrency or --clear, not both")
        try:
            capacity.set_concurrency(concurrency, name=name, by=who(options), using=alias)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        target = "every worker" if name == capacity.EVERY_WORKER else f"workers {printable(name)}"
        if clear:
            self.summary(f"{target}: cleared, back to the concurrency each was started with")
        else:
            self.summary(
                f"{target}: {concurrency} at once, within a few seconds (each within 1 and its "
                "--max-concurrency)"
            )
