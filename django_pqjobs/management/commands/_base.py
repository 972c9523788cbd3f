"""What every django-pqjobs command shares: ``--database`` and output by verbosity."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from ... import schema
from ...audit import AuditNotWritable
from ...conf import conf
from ...errors import DatabaseNotReady


class PQJobsCommand(BaseCommand):
    """A command on the job tables: takes ``--database`` and prints by ``--verbosity``.

    Verbosity 0 prints nothing but errors (raised as ``CommandError``), 1 the summary,
    2 a line per item where there are items. A database that cannot be reached, or whose
    job tables are missing (``migrate`` not run), is such an error: one line, not a
    traceback.
    """

    verbosity = 1
    database: str | None = None  # the alias the command works on, once known

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.add_argument(
            "--database",
            default=None,
            help="database alias of the job tables (default: PQJOBS['DATABASE'])",
        )
        return parser

    def execute(self, *args: Any, **options: Any) -> str | None:
        self.verbosity = options.get("verbosity", 1)
        try:
            return super().execute(*args, **options)
        except AuditNotWritable as exc:
            raise CommandError(str(exc)) from exc
        except DatabaseNotReady as exc:
            raise CommandError(str(exc)) from None
        except DatabaseError as exc:
            alias = self.database
            failure = None
            if alias is not None:
                failure = schema.unreachable(exc, alias) or schema.not_migrated(exc, alias)
            if failure is None:
                raise
            raise CommandError(str(failure)) from None

    def alias(self, options: dict[str, Any]) -> str:
        """The ``--database`` alias, else ``PQJOBS['DATABASE']``; must be in DATABASES."""
        alias = options.get("database")
        if alias is None:
            alias = conf.DATABASE
        if alias not in settings.DATABASES:
            known = ", ".join(sorted(settings.DATABASES))
            raise CommandError(
                f"database alias {alias!r} is not in DATABASES (configured: {known})"
            )
        self.database = str(alias)
        return self.database

    def summary(self, line: str) -> None:
        """Print ``line`` at verbosity 1 and above."""
        if self.verbosity >= 1:
            self.stdout.write(line)

    def detail(self, line: str) -> None:
        """Print ``line`` at verbosity 2 and above."""
        if self.verbosity >= 2:
            self.stdout.write(line)

    def warning(self, line: str) -> None:
        """Print ``warning: line`` on stderr at verbosity 1 and above."""
        if self.verbosity >= 1:
            self.stderr.write(f"warning: {line}")


def iso(moment: datetime) -> str:
    """A moment as every command prints it: ISO 8601 to the second, with its UTC offset."""
    return moment.isoformat(timespec="seconds")
