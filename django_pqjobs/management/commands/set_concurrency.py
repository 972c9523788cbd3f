"""``manage.py set_concurrency``: change how many jobs running workers run at once."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from ... import capacity, monitoring
from ...printable import printable
from ._arguments import add_by, who
from ._base import PQJobsCommand, iso


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
                    f"{iso(setting.set_at)}{who_set})"
                )
            if not found:
                self.summary("no concurrency is set: every worker runs at its own")
            return
        if concurrency is not None and clear:
            raise CommandError("give a concurrency or --clear, not both")
        try:
            changed = capacity.set_concurrency(concurrency, name=name, by=who(options), using=alias)
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        target = "every worker" if name == capacity.EVERY_WORKER else f"workers {printable(name)}"
        if not changed:
            self.summary(f"{target}: nothing was set, nothing to clear")
            return
        if clear:
            self.summary(f"{target}: cleared, back to the concurrency each was started with")
        else:
            self.summary(f"{target}: {concurrency} at once, within a few seconds")
        self.report_workers(alias, name)

    def report_workers(self, alias: str, name: str) -> None:
        """Say what each live worker the setting names will run, and warn when it names
        none or a worker's bounds change the number asked."""
        live = capacity.effective(alias)
        named = [w for w in live if w.covered_by(name)]
        if not named and name == capacity.EVERY_WORKER:
            self.summary("no worker is live: workers follow the setting as they start")
            return
        if not named:
            ids = [w.worker_id for w in live]
            close = monitoring.closest_worker_name(name, ids)
            shown = ", ".join(monitoring.worker_names(ids))
            self.warning(
                printable(
                    f"no live worker is {name!r} or in a worker group of that name"
                    + (f" (did you mean {close!r}?)" if close else "")
                    + "; the setting is kept for workers started under that name"
                    + (f" (live: {shown})" if shown else "")
                )
            )
            return
        for worker in named:
            line = printable(f"worker {worker.worker_id}: runs {worker.runs} ({worker.source})")
            order = capacity.names_of(worker.worker_id)
            if worker.setting is not None and order.index(worker.setting) < order.index(name):
                self.warning(f"{line}: a more specific setting applies to it")
            elif worker.asked is not None and worker.runs != worker.asked:
                self.warning(line)
            else:
                self.summary(line)
