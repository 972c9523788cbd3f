"""``manage.py jobs_health``: one line and an exit status, for liveness and readiness probes."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import CommandParser
from django.db import DatabaseError

from ... import health
from ...printable import printable
from ...schema import (
    open_schema_advice,
    squatted_advice,
    squatted_partition_names,
    writable_by_everyone,
)
from ._arguments import duration, positive_int, queue_name
from ._base import PQJobsCommand


class Command(PQJobsCommand):
    help = (
        "Check that a worker is alive and claiming (the newest worker on this host, or "
        "--worker-id, or --any-host) and, with --max-lag, that the oldest due job has not "
        "waited too long. Prints one line; exits 0 when healthy, 1 when no worker is alive "
        "and claiming, 3 when the queue lags, 4 when the database cannot be read."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        which = parser.add_mutually_exclusive_group()
        which.add_argument("--worker-id", default=None, help="check this worker")
        which.add_argument(
            "--host", default=None, help="check the newest worker on HOST (default: this host)"
        )
        which.add_argument(
            "--any-host",
            dest="min_workers",
            type=positive_int,
            nargs="?",
            const=1,
            default=None,
            metavar="N",
            help="healthy when N (default 1) workers on any host are alive and claiming",
        )
        which.add_argument(
            "--skip-worker", action="store_true", help="check only the lag (with --max-lag)"
        )
        parser.add_argument(
            "--max-heartbeat-age",
            type=duration,
            default=None,
            help="a worker is alive while its heartbeat is younger than this "
            "(default: three heartbeat intervals, 30s)",
        )
        parser.add_argument(
            "--max-loop-age",
            type=duration,
            default=health.DEFAULT_MAX_LOOP_AGE,
            help="a worker is claiming while its claim loop ran within this (default 60s)",
        )
        parser.add_argument(
            "--max-lag",
            type=duration,
            default=None,
            help="also fail (exit 3) when the oldest due job has waited longer, e.g. 5m",
        )
        parser.add_argument(
            "--queue",
            "-q",
            dest="queues",
            action="append",
            type=queue_name,
            default=None,
            help="queue whose lag --max-lag checks; repeatable (default: every queue)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        checks: list[health.Health] = []
        ages = {
            "max_heartbeat_age": options["max_heartbeat_age"],
            "max_loop_age": options["max_loop_age"],
            "using": alias,
        }
        if options["min_workers"] is not None:
            checks.append(health.check_workers(min_workers=options["min_workers"], **ages))
        elif not options["skip_worker"]:
            checks.append(
                health.check_worker(
                    worker_id=options["worker_id"], hostname=options["host"], **ages
                )
            )
        if options["max_lag"] is not None:
            checks.append(
                health.check_lag(options["max_lag"], queues=options["queues"], using=alias)
            )
        verdict = health.combine(checks) if checks else health.Health(0, "ok: nothing to check")
        self.summary(printable(verdict.line))
        self._warn_about_the_schema(alias)
        if not verdict.ok:
            sys.exit(verdict.status)

    def _warn_about_the_schema(self, alias: str) -> None:
        """A warning on stderr (the verdict and exit status are unchanged) when every role
        may create objects in the job tables' schema, and one when a history partition's
        name is taken by an object that is not ours."""
        try:
            schema = writable_by_everyone(alias)
            squatted = squatted_partition_names(alias)
        except DatabaseError:  # unreachable: the verdict already says so
            return
        if schema is not None:
            self.warning(printable(open_schema_advice(schema)))
        if squatted:
            self.warning(printable(squatted_advice(squatted)))
