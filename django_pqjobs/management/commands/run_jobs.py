"""``manage.py run_jobs``: start a worker."""

from __future__ import annotations

import argparse
import gc
import logging
import math
import sys
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from ... import capacity, monitoring, schema
from ... import options as job_options
from ...conf import conf
from ...durations import in_words
from ...errors import DatabaseNotReady, InvalidJobOption
from ...printable import counted, printable
from ...registry import JobType, registry
from ...tasks.activation import backends
from ._arguments import duration, positive_int, processes_count, queue_name
from ._base import PQJobsCommand


class Command(PQJobsCommand):
    help = (
        "Run a django-pqjobs worker: N executor threads claim and run jobs until SIGTERM / "
        "SIGINT (graceful; a second signal exits at once) or, with --burst, until the queue "
        "is drained."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--concurrency",
            "-c",
            type=positive_int,
            default=None,
            help="executor threads (default: PQJOBS['CONCURRENCY'] or WORKER_CONCURRENCY, else 1)",
        )
        parser.add_argument(
            "--max-concurrency",
            type=positive_int,
            default=None,
            metavar="M",
            help="executor threads started, the most an operator's live setting "
            "(set_concurrency, the admin) may raise the concurrency to (default: "
            "--concurrency; per process)",
        )
        parser.add_argument(
            "--processes",
            "-p",
            type=processes_count,
            default=1,
            metavar="N",
            help="worker processes, each with --concurrency threads: a whole number, or auto "
            "(one per core); a process that dies is started again (default: 1)",
        )
        parser.add_argument(
            "--queue",
            "-q",
            dest="queues",
            action="append",
            type=queue_name,
            default=None,
            help="queue to take jobs from; repeatable "
            "(default: PQJOBS['QUEUES'], else every queue)",
        )
        parser.add_argument(
            "--min-priority",
            type=priority_floor,
            default=None,
            metavar="PRIORITY",
            help="take only jobs of at least this priority: a whole number or low, normal, "
            "high, critical (default: every priority)",
        )
        parser.add_argument(
            "--burst", action="store_true", help="run the jobs that are due, then exit"
        )
        parser.add_argument(
            "--max-jobs", type=positive_int, default=None, help="exit after claiming this many jobs"
        )
        parser.add_argument(
            "--worker-id",
            default=None,
            help="name shown in locked_by and the admin (default: host-pid-rand)",
        )
        parser.add_argument(
            "--isolation",
            choices=["thread", "process"],
            default=None,
            help="run every job in a thread (default) or in a child process that is killed "
            "on timeout; @job(isolation=...) overrides per type (PQJOBS['ISOLATION'])",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=duration,
            default=None,
            help="grace period for running jobs at shutdown, e.g. 30s "
            "(default: PQJOBS['SHUTDOWN_TIMEOUT'])",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        alias = self.alias(options)
        if not conf.ENABLED:
            self.summary("worker disabled (WORKER_ENABLED / PQJOBS['ENABLED'] is false)")
            return
        worker_id = options["worker_id"]
        if worker_id is not None and (not worker_id.strip() or len(worker_id) > 200):
            raise CommandError("--worker-id must be 1-200 characters")
        _check_max_concurrency(options)
        _require_ready(alias)
        _configure_logging(options["verbosity"])
        self._say_what_it_runs()
        processes = options["processes"]
        if processes > 1:
            from ...worker.supervisor import Supervisor

            def run_child(n: int) -> int:
                child_id = None if worker_id is None else f"{worker_id}-{n}"
                return self._run_worker(options, alias, child_id)

            supervisor = Supervisor(
                processes,
                run_child,
                burst=options["burst"],
                shutdown_timeout=(
                    conf.SHUTDOWN_TIMEOUT
                    if options["shutdown_timeout"] is None
                    else options["shutdown_timeout"]
                ),
            )
            code = supervisor.run()
        else:
            code = self._run_worker(options, alias, worker_id)
        if options["burst"]:
            self._say_what_it_left(alias, options["queues"], options["min_priority"])
        if code:
            sys.exit(code)

    def _run_worker(self, options: dict[str, Any], alias: str, worker_id: str | None) -> int:
        """Run one worker in this process until it stops; its exit code."""
        from ...worker.worker import Worker

        worker = Worker(
            concurrency=options["concurrency"],
            max_concurrency=options["max_concurrency"],
            queues=options["queues"],
            min_priority=options["min_priority"],
            worker_id=worker_id,
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            shutdown_timeout=options["shutdown_timeout"],
            isolation=options["isolation"],
            database=alias,
            # -v 2 adds a line per successful job (they cost throughput; see LOG_SUCCESSES)
            log_successes=True if options["verbosity"] >= 2 else None,
            install_signal_handlers=True,
        )
        _freeze_startup_heap()
        return int(worker.run() or 0)

    def _say_what_it_runs(self) -> None:
        """The job types registered at start and, where ``TASKS`` uses this backend, that
        tasks run too (a task's module is imported when its first job arrives)."""
        job_types = registry.all()
        task_backends = backends()
        if job_types or not task_backends:
            names = ", ".join(t.name for t in job_types) or "(none: no jobs modules found)"
            self.summary(printable(f"job types: {names}"))
        for job_type in job_types:
            self.detail(printable(f"    {job_type.name}{_declared_options(job_type)}"))
        if task_backends:
            aliases = " and ".join(f"TASKS[{alias!r}]" for alias in task_backends)
            self.summary(
                printable(
                    f"tasks: every @task enqueued through {aliases}, each imported from its "
                    "app when its first job arrives"
                )
            )

    def _say_what_it_left(
        self, alias: str, queues: list[str] | None, min_priority: int | None
    ) -> None:
        """A burst worker's last line: the jobs of its queues it did not run, and when they
        are due (a retry in its backoff, a delayed job, a schedule's tick that fired as it
        stopped), so an empty-looking run is not mistaken for an empty queue."""
        try:
            left = monitoring.left_behind(alias, queues, min_priority)
        except DatabaseError:
            return  # the database went away as the worker stopped: its log says so
        parts = []
        if left.due:
            ticks = left.due_from_schedules
            by_schedules = f" ({ticks} enqueued by schedules)" if ticks else ""
            parts.append(f"{counted(left.due, 'job')} due now{by_schedules}")
        if left.retries:
            retries = counted(left.retries, "retry", "retries")
            parts.append(f"{retries}{_due_in(left.retries, left.retry_in)}")
        if left.delayed:
            delayed = counted(left.delayed, "delayed job")
            parts.append(f"{delayed}{_due_in(left.delayed, left.delayed_in)}")
        if left.paused:
            parts.append(f"{counted(left.paused, 'job')} held by a pause")
        if left.limited:
            parts.append(f"{counted(left.limited, 'job')} held by a concurrency or rate limit")
        self.summary(f"left behind: {', '.join(parts) or 'nothing'}")


def _due_in(count: int, seconds: float | None) -> str:
    """`` due in 2 seconds``, or ``, the first due in 2 seconds`` for several jobs."""
    first = ", the first" if count > 1 else ""
    if seconds is None or not math.isfinite(seconds):
        return f"{first} never due"  # a run_after of 'infinity', written behind our back
    # to the second under a minute, else to the minute: "due in 2 hours", not "1 hour 59
    # minutes 59 seconds"
    rounded = math.ceil(seconds) if seconds <= 60 else math.ceil(seconds / 60) * 60
    return f"{first} due in {in_words(max(1, rounded))}"


def _require_ready(alias: str) -> None:
    """Stop with one line when the database cannot be reached at start (a wrong name or
    password, a server that is not there) or its job tables are missing or behind this
    code: a worker would otherwise log the same database error on every claim, for ever.
    A database that goes away once the worker runs is an outage it rides out."""
    try:
        schema.require_postgresql(alias)
        schema.require_reachable(alias)
        missing = schema.missing_migrations(alias)
    except DatabaseNotReady as exc:
        raise CommandError(str(exc)) from None
    if missing:
        shown = ", ".join(missing[:3]) + (
            f" and {len(missing) - 3} more" if len(missing) > 3 else ""
        )
        raise CommandError(
            f"the job tables of database {alias!r} are missing or out of date (not applied: "
            f"{shown}): run `manage.py migrate` first"
        )


def priority_floor(text: str) -> int:
    """``--min-priority``: a whole number or the name of a ``Priority``."""
    try:
        value: object = int(text)
    except ValueError:
        value = text
    try:
        return job_options.priority(value, "--min-priority")
    except InvalidJobOption as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _declared_options(job_type: JobType) -> str:
    """`` (queue=emails, timeout=30)``: the options ``@job`` set (the rest are defaults)."""
    declared = {
        "queue": job_type.queue,
        "priority": job_type.priority,
        "max_attempts": job_type.max_attempts,
        "timeout": job_type.timeout,
        "isolation": job_type.isolation,
        "atomic": job_type.atomic or None,
    }
    shown = ", ".join(
        f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
        for key, value in declared.items()
        if value is not None
    )
    return f" ({shown})" if shown else ""


def _freeze_startup_heap() -> None:
    """Keep the garbage collector away from what Django and the apps loaded at startup.

    A full collection walks every tracked object: in a worker that is tens of thousands of
    objects of settings, models, admin and URL patterns, a pause during which no job is
    claimed or started (seen as outliers in the enqueue-to-start latency). These objects live
    as long as the process, so they are collected once and then frozen; objects created
    afterwards are collected as usual. Only here, where the command owns the process: an
    embedded worker leaves the web process's collector alone.
    """
    gc.collect()
    gc.freeze()


def _configure_logging(verbosity: int) -> None:
    """Give the django_pqjobs logger a console handler unless the project configured one."""
    log = logging.getLogger("django_pqjobs")
    if log.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    log.addHandler(handler)
    log.setLevel(
        logging.DEBUG if verbosity >= 3 else logging.INFO if verbosity >= 1 else logging.WARNING
    )


def _check_max_concurrency(options: dict[str, Any]) -> None:
    """Before any process starts (each would refuse it the same way)."""
    start = options["concurrency"] if options["concurrency"] is not None else conf.CONCURRENCY
    try:
        capacity.max_concurrency(start, options["max_concurrency"], "--max-concurrency")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
