"""Per-job cost of process isolation: the same no-op jobs run in threads and in children.

Run: DATABASE_URL=postgres://... python benchmarks/isolation_overhead.py [jobs]
Uses the test settings (tests.settings) and their handlers; migrates the database first.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")


def main() -> None:
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    logging.getLogger("django_pqjobs").setLevel(logging.ERROR)

    from django_pqjobs import enqueue_many
    from django_pqjobs.models import Job
    from django_pqjobs.worker.worker import Worker

    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    print(f"{'isolation':<10} {'concurrency':>11} {'jobs':>6} {'ms/job':>8} {'jobs/s':>8}")
    for isolation in ("thread", "process"):
        for concurrency in (1, 4):
            Job.objects.all().delete()
            enqueue_many("tests.noop", [{}] * jobs)
            worker = Worker(concurrency=concurrency, burst=True, isolation=isolation)
            started = time.perf_counter()
            worker.run()
            elapsed = time.perf_counter() - started
            assert worker.outcomes == {"done": jobs}, worker.outcomes
            print(
                f"{isolation:<10} {concurrency:>11} {jobs:>6} "
                f"{elapsed / jobs * 1000:>8.2f} {jobs / elapsed:>8.0f}"
            )
    Job.objects.all().delete()


if __name__ == "__main__":
    main()
