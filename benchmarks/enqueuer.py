"""``python -m benchmarks.enqueuer SECONDS [JOB_TYPE]``: call ``enqueue_job`` in a loop, one
job per transaction (as web requests do), for SECONDS; prints how many it enqueued."""

import sys
import time

from benchmarks.harness import setup_django


def main() -> None:
    seconds = float(sys.argv[1])
    job_type = sys.argv[2] if len(sys.argv) > 2 else "tests.started_at"
    setup_django(migrate=False)
    from django_pqjobs import enqueue_job

    count = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        enqueue_job(job_type)
        count += 1
    print(count)


if __name__ == "__main__":
    main()
