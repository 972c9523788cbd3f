"""``manage.py prune_jobs``: delete finished jobs past their retention period."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from ...conf import conf
from ._arguments import duration


class Command(BaseCommand):
    help = "Delete done / failed / cancelled jobs older than PQJOBS['RETENTION'] (with history)."

    def add_arguments(self, parser: CommandParser) -> None:
        for status in ("done", "failed", "cancelled"):
            parser.add_argument(
                f"--{status}",
                type=duration,
                default=None,
                help=f"keep {status} jobs this long, e.g. 7d (default: "
                f"PQJOBS['RETENTION']['{status}'])",
            )

    def handle(self, *args: Any, **options: Any) -> None:
        from ...worker import queries

        retention = dict(conf.RETENTION)
        for status in ("done", "failed", "cancelled"):
            if options[status] is not None:
                retention[status] = options[status]
        deleted = queries.prune(conf.DATABASE, retention)
        for status, count in deleted.items():
            kept = retention[status]
            rule = "kept forever" if kept is None else f"older than {kept:g} s"
            self.stdout.write(f"{status}: deleted {count} ({rule})")
