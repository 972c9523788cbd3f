"""``manage.py reap_stale``: rescue running jobs whose worker stopped heartbeating."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from ...conf import conf
from ...durations import in_words
from ...printable import counted, printable
from ...worker.housekeeping import reap_stale
from ._arguments import duration
from ._base import PQJobsCommand


class Command(PQJobsCommand):
    help = (
        "Give running jobs whose worker stopped heartbeating back to ready (or failed when "
        "their attempts are used up). Workers do this on their own every REAP_INTERVAL."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            type=duration,
            default=None,
            help="heartbeat age that counts as stale, e.g. 20m "
            "(default: PQJOBS['STALE_TIMEOUT'] / WORKER_STALE_TIMEOUT)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        stale = options["older_than"]
        if stale is None:
            stale = conf.STALE_TIMEOUT
        rescued = reap_stale(alias, stale)
        if rescued is None:
            self.summary("another worker is rescuing stale jobs right now; nothing done")
            return
        for job in rescued:
            self.detail(
                f"job {job.job_id} {printable(job.job_type)} attempt {job.attempt} "
                f"(worker {printable(job.worker_id)}) -> {job.status}"
            )
        self.summary(
            f"rescued {counted(len(rescued), 'stale job')} (no heartbeat for {in_words(stale)})"
        )
