"""``manage.py prune_jobs``: delete finished jobs (and operator actions of the audit trail)
past their retention period, and move the others finished ``HISTORY_AFTER`` ago to their
history partitions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.db import transaction

from ... import audit
from ...conf import conf
from ...durations import in_words
from ...worker.housekeeping import (
    RETAINED,
    prune,
    prune_batches,
    prune_sequences,
    shelve_finished,
)
from ._arguments import duration
from ._base import PQJobsCommand


class Command(PQJobsCommand):
    help = (
        "Delete done / failed / cancelled / expired jobs older than PQJOBS['RETENTION'] (with "
        "history), and operator actions older than PQJOBS['AUDIT_RETENTION']; move the "
        "jobs finished PQJOBS['HISTORY_AFTER'] ago to their history partitions."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        for status in RETAINED:
            parser.add_argument(
                f"--{status}",
                type=duration,
                default=None,
                help=f"keep {status} jobs this long, e.g. 7d (default: "
                f"PQJOBS['RETENTION']['{status}'])",
            )

        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="say what would be deleted and moved, and change nothing (the same "
            "statements run in a transaction that is rolled back, so it takes about as long "
            "as the real run)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        retention = dict(conf.RETENTION)
        for status in RETAINED:
            if options[status] is not None:
                retention[status] = options[status]
        if not options["dry_run"]:
            self.prune(alias, retention, dry=False)
            return
        # The same statements as the real run, so that the counts are exact; rolled back.
        with transaction.atomic(using=alias):
            self.prune(alias, retention, dry=True)
            transaction.set_rollback(True, using=alias)
        self.summary("dry run: nothing was changed")

    def prune(self, alias: str, retention: dict[str, float | None], dry: bool) -> None:
        def did(verb: str) -> str:  # "deleted" / "would delete"
            return f"would {verb}" if dry else {"forget": "forgot"}.get(verb, f"{verb}d")

        deleted = prune(alias, retention, dry_run=dry)
        for status, count in deleted.items():
            kept = retention[status]
            rule = "kept forever" if kept is None else f"older than {in_words(kept)}"
            self.summary(f"{status}: {did('delete')} {count} ({rule})")
        batches = prune_batches(alias, retention)
        self.summary(f"batches: {did('delete')} {batches} (finished, no job left)")
        after = conf.HISTORY_AFTER
        if after is None:
            self.summary("history: not moved (PQJOBS['HISTORY_AFTER'] is None)")
        else:
            # (in the spans PQJOBS["RETENTION"] gives, as the workers' maintenance does)
            moved = shelve_finished(alias)
            self.summary(
                f"history: {did('move')} {sum(moved.values())} to their partitions (finished "
                f"over {in_words(after)} ago)"
            )
        forgot = prune_sequences(alias)
        self.summary(f"sequences: {did('forget')} {forgot} (their last job is gone)")
        kept = conf.AUDIT_RETENTION
        actions = audit.prune(alias, kept)
        if actions is None:
            self.summary(
                "operator actions: not pruned (this database role may not delete from "
                "pqjobs_audit; run prune_jobs as the tables' owner)"
            )
            return
        rule = "kept forever" if kept is None else f"older than {in_words(kept)}"
        self.summary(f"operator actions: {did('delete')} {actions} ({rule})")
