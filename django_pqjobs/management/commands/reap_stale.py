"""``manage.py reap_stale``: rescue running jobs whose worker stopped heartbeating."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...conf import conf
from ...durations import in_words
from ...printable import counted, printable
from ...worker.housekeeping import reap_stale
from ._arguments import duration, worker_id
from ._base import PQJobsCommand


class Command(PQJobsCommand):
    help = (
        "Give running jobs whose worker stopped heartbeating back to ready (or failed when "
        "their attempts are used up). Workers do this on their own every REAP_INTERVAL."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group()
        which.add_argument(
            "--older-than",
            type=duration,
            default=None,
            help="heartbeat age that counts as stale, e.g. 20m "
            "(default: PQJOBS['STALE_TIMEOUT'] / WORKER_STALE_TIMEOUT)",
        )
        which.add_argument(
            "--worker-id",
            type=worker_id,
            default=None,
            help="rescue every running job of this worker now, whatever its heartbeat: for a "
            "worker you know is gone (killed, or stopped by a second Ctrl-C); a live worker's "
            "outcomes for them would be discarded",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        stale = options["older_than"]
        if stale is None:
            stale = conf.STALE_TIMEOUT
        gone = options["worker_id"]
        rescued = reap_stale(alias, stale, gone)
        if rescued is None:
            self.summary("another worker is rescuing stale jobs right now; nothing done")
            return
        for job in rescued:
            self.detail(
                f"job {job.job_id} {printable(job.job_type)} attempt {job.attempt} "
                f"(worker {printable(job.worker_id)}) -> {job.status}"
            )
        if gone is not None:
            self.summary(f"rescued {counted(len(rescued), 'job')} of worker {printable(gone)}")
            return
        self.summary(
            f"rescued {counted(len(rescued), 'stale job')} (no heartbeat for {in_words(stale)})"
        )
