"""``manage.py demo``: enqueue sample jobs, run a worker until they finish, show what happened."""

from __future__ import annotations

import time
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from django_pqjobs import enqueue_job, enqueue_on_commit
from django_pqjobs.models import Job, JobAttempt
from django_pqjobs.worker.worker import Worker
from shop.models import Order

DEMO_TYPES = ["send_receipt", "flaky_report", "summarize", "import_contacts"]


class Command(BaseCommand):
    help = "Enqueue the demo jobs, run a worker until they are finished, print a summary."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--timeout", type=float, default=60, help="seconds to wait at most")

    def handle(self, *args: Any, **options: Any) -> None:
        Job.objects.filter(job_type__in=DEMO_TYPES).delete()
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

        out.write("\nRunning a worker (2 executor threads) until the demo jobs are finished...")
        worker = Worker(concurrency=2, shutdown_timeout=5)
        worker.run_in_thread("demo-worker")
        started = time.monotonic()
        try:
            while time.monotonic() - started < options["timeout"]:
                if not Job.objects.filter(job_type__in=DEMO_TYPES).active().exists():
                    break
                time.sleep(0.2)
            else:
                out.write(self.style.WARNING("  gave up waiting; some jobs are still active"))
        finally:
            worker.stop()
            if worker.thread is not None:
                worker.thread.join(15)
        out.write(f"  finished in {time.monotonic() - started:.1f} s\n")
        self.summary()

    def summary(self) -> None:
        out = self.stdout
        jobs = Job.objects.filter(job_type__in=DEMO_TYPES).order_by("id")
        header = f"{'id':>5}  {'type':<16} {'status':<9} {'tries':>5} {'ms':>6}  result / error"
        out.write(header)
        out.write("-" * len(header))
        for job in jobs:
            if job.result is not None:
                detail = str(job.result)
            elif job.last_error:
                detail = job.last_error.strip().splitlines()[-1]
            else:
                detail = ""
            style = {"done": self.style.SUCCESS, "failed": self.style.ERROR}.get(job.status, str)
            out.write(
                f"{job.id:>5}  {job.job_type:<16} {style(f'{job.status:<9}')} "
                f"{job.attempts:>5} {job.duration_ms or 0:>6}  {detail[:70]}"
            )
        attempts = JobAttempt.objects.filter(job__in=jobs).order_by("job_id", "attempt")
        if attempts:
            out.write("\nFailure history (every failed attempt is kept):")
            for attempt in attempts:
                last = attempt.traceback.strip().splitlines()[-1] if attempt.traceback else ""
                out.write(
                    f"  job {attempt.job_id} attempt {attempt.attempt} ({attempt.outcome}, "
                    f"worker {attempt.worker_id}): {last[:80]}"
                )
