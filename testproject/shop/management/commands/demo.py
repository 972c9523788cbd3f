"""``manage.py demo``: enqueue sample jobs, run a worker until they finish, run the recurring
job once, show what happened."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from io import StringIO
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, transaction
from django.db.models import Max, QuerySet, Sum

from django_pqjobs import DatabaseNotReady, enqueue_job, enqueue_on_commit, schema
from django_pqjobs.models import Job, JobAttempt, Schedule
from django_pqjobs.worker.worker import Worker
from shop.models import Order

DEMO_TYPES = ["send_receipt", "flaky_report", "summarize", "import_contacts"]
SCHEDULE = "order-stats"  # declared in PQJOBS["SCHEDULES"] (config/settings.py)
SCHEDULED_TYPE = "order_stats"


class Command(BaseCommand):
    help = (
        "Enqueue the demo jobs, run a worker until they are finished, run the recurring job "
        "once (trigger_schedule), print a summary."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=60, help="seconds to wait at most")
        parser.add_argument(
            "--scheduled-runs",
            type=int,
            default=1,
            help="finished runs of the recurring job to wait for (default 1: the one the demo "
            "triggers; each further one comes a minute later)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            schema.require_reachable(DEFAULT_DB_ALIAS)
        except DatabaseNotReady as exc:
            raise CommandError(f"{exc}; check DATABASE_URL") from None
        Job.objects.filter(job_type__in=[*DEMO_TYPES, SCHEDULED_TYPE]).delete()
        # Job ids only grow: the jobs of this run are the ones above this id.
        self.first_id = Job.objects.aggregate(last=Max("id"))["last"] or 0
        out = self.stdout

        out.write("Enqueueing:")
        with transaction.atomic():
            order = Order.objects.create(email="ada@example.com", total="42.00")
            enqueue_on_commit("send_receipt", {"order_id": order.pk})
            out.write(f"  order {order.pk} created; its receipt job is enqueued on commit")
        first = enqueue_job("flaky_report", {"name": "weekly"}, dedupe_key="report:weekly")
        again = enqueue_job("flaky_report", {"name": "weekly"}, dedupe_key="report:weekly")
        out.write(f"  flaky_report enqueued twice with one dedupe_key: ids {first} and {again}")
        enqueue_job("import_contacts", {"path": "/nonexistent/contacts.csv"})
        out.write("  import_contacts enqueued (its file does not exist: it will fail for good)")
        out.write(f"  and the schedule {SCHEDULE!r} enqueues {SCHEDULED_TYPE} every minute")

        wanted = options["scheduled_runs"]
        out.write(
            "\nRunning a worker (2 executor threads) until the demo jobs are finished, then "
            f"{SCHEDULED_TYPE} once..."
        )
        worker = Worker(concurrency=2, shutdown_timeout=5)
        worker.run_in_thread("demo-worker")
        started = time.monotonic()
        deadline = started + options["timeout"]
        try:
            # The worker declares the schedule as it starts.
            finished = self.wait_until(
                lambda: (
                    not self.demo_jobs().active().exists()
                    and Schedule.objects.filter(name=SCHEDULE).exists()
                ),
                deadline,
            )
            if finished:
                self.run_schedule_now()
                finished = self.wait_until(
                    lambda: self.scheduled_runs().filter(status="done").count() >= wanted,
                    deadline,
                )
            if not finished:
                out.write(self.style.WARNING("  gave up waiting; some jobs are still active"))
        finally:
            worker.stop()
            if worker.thread is not None:
                worker.thread.join(15)
        out.write(f"  finished in {time.monotonic() - started:.1f} s\n")
        self.summary()

    def wait_until(self, condition: Callable[[], bool], deadline: float) -> bool:
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def run_schedule_now(self) -> None:
        """One run of the schedule now, as its Run now button in the admin does: its next
        tick is a minute away."""
        if self.scheduled_runs().exists():
            return  # a run missed while no worker ran is being caught up
        said = StringIO()
        call_command("trigger_schedule", SCHEDULE, by="demo", stdout=said)
        self.stdout.write(f"  {said.getvalue().strip()} (manage.py trigger_schedule {SCHEDULE})")

    def demo_jobs(self) -> QuerySet[Job]:
        return Job.objects.filter(job_type__in=DEMO_TYPES, id__gt=self.first_id)

    def scheduled_runs(self) -> QuerySet[Job]:
        return Job.objects.filter(schedule__name=SCHEDULE, id__gt=self.first_id)

    def summary(self) -> None:
        out = self.stdout
        jobs = self.demo_jobs().order_by("id")
        header = f"{'id':>5}  {'type':<16} {'status':<9} {'tries':>5} {'ms':>6}  result / error"
        out.write(header)
        out.write("-" * len(header))
        for job in jobs:
            out.write(self.job_line(job))
        out.write(self.totals(jobs))

        attempts = JobAttempt.objects.filter(job__in=jobs).order_by("job_id", "attempt")
        if attempts:
            out.write("\nFailure history (every failed attempt is kept):")
            for attempt in attempts:
                last = attempt.traceback.strip().splitlines()[-1] if attempt.traceback else ""
                out.write(
                    f"  job {attempt.job_id} attempt {attempt.attempt} ({attempt.outcome}, "
                    f"worker {attempt.worker_id}): {last[:80]}"
                )
        self.schedule_summary()

    def job_line(self, job: Job) -> str:
        if job.result is not None:
            detail = str(job.result)
        elif job.last_error:
            detail = job.last_error.strip().splitlines()[-1]
        else:
            detail = ""
        style = {"done": self.style.SUCCESS, "failed": self.style.ERROR}.get(job.status, str)
        return (
            f"{job.id:>5}  {job.job_type:<16} {style(f'{job.status:<9}')} "
            f"{job.attempts:>5} {job.duration_ms or 0:>6}  {detail[:70]}"
        )

    def totals(self, jobs: QuerySet[Job]) -> str:
        """One line that counts jobs and attempts apart: a retried job is one job."""
        statuses = Counter(jobs.values_list("status", flat=True))
        attempts = jobs.aggregate(total=Sum("attempts"))["total"] or 0
        count = sum(statuses.values())
        by_status = ", ".join(f"{n} {status}" for status, n in sorted(statuses.items()))
        return (
            f"{count} job{'s' * (count != 1)} ({by_status}) in "
            f"{attempts} attempt{'s' * (attempts != 1)}"
        )

    def schedule_summary(self) -> None:
        out = self.stdout
        schedule = Schedule.objects.filter(name=SCHEDULE).first()
        if schedule is None:
            out.write(f"\nThe schedule {SCHEDULE!r} is not declared: no recurring job ran.")
            return
        if schedule.interval_seconds:
            every = f"every {schedule.interval_seconds:g} s"
        else:
            every = f"cron {schedule.cron!r}"
        runs = list(self.scheduled_runs().order_by("id"))
        out.write(
            f"\nRecurring job (schedule {SCHEDULE!r}, {every}, declared in PQJOBS['SCHEDULES']):"
            f" {len(runs)} run{'s' * (len(runs) != 1)} while the demo ran"
        )
        for job in runs:
            out.write(
                f"  job {job.id} enqueued at {job.created_at:%H:%M:%S}: {job.status} {job.result}"
            )
        if schedule.next_run_at is not None:
            out.write(f"  next run at {schedule.next_run_at:%H:%M:%S} (UTC)")
