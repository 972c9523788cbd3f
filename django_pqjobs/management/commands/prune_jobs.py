"""``manage.py prune_jobs``: delete finished jobs (and operator actions of the audit trail)
past their retention period, and move the others finished ``HISTORY_AFTER`` ago to their
history partitions."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

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

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        retention = dict(conf.RETENTION)
        for status in RETAINED:
            if options[status] is not None:
                retention[status] = options[status]
        deleted = prune(alias, retention)
        for status, count in deleted.items():
            kept = retention[status]
            rule = "kept forever" if kept is None else f"older than {in_words(kept)}"
            self.summary(f"{status}: deleted {count} ({rule})")
        self.summary(f"batches: deleted {prune_batches(alias, retention)} (finished, no job left)")
        after = conf.HISTORY_AFTER
        if after is None:
            self.summary("history: not moved (PQJOBS['HISTORY_AFTER'] is None)")
        else:
            # (in the spans PQJOBS["RETENTION"] gives, as the workers' maintenance does)
            moved = shelve_finished(alias)
            self.summary(
                f"history: moved {sum(moved.values())} to their partitions (finished over "
                f"{in_words(after)} ago)"
            )
        self.summary(f"sequences: forgot {prune_sequences(alias)} (their last job is gone)")
        kept = conf.AUDIT_RETENTION
        actions = audit.prune(alias, kept)
        if actions is None:
            self.summary(
                "operator actions: not pruned (this database role may not delete from "
                "pqjobs_audit; run prune_jobs as the tables' owner)"
            )
            return
        rule = "kept forever" if kept is None else f"older than {in_words(kept)}"
        self.summary(f"operator actions: deleted {actions} ({rule})")
