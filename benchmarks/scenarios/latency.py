"""Latency: an idle worker, jobs enqueued one at a time 20 ms apart.

Measured from the INSERT (``created_at``, database clock) to the moment the handler
starts (``time.time()`` in the handler, returned as the job's result); the database and the
worker share this machine's clock. The claim (``locked_at``) is reported beside it.
"""

from __future__ import annotations

import time

from django_pqjobs import enqueue_job

from ..harness import Result, percentile, reset_tables, sql, worker_process


def run(quick: bool) -> list[Result]:
    reset_tables()
    count = 150 if quick else 300
    with worker_process("--concurrency", "4"):
        time.sleep(4)  # let the worker reach its longest idle poll
        for _ in range(count):
            enqueue_job("tests.started_at")
            time.sleep(0.02)
        time.sleep(1)
    rows = sql(
        "SELECT (result::text::float8 - extract(epoch FROM created_at)) * 1000, "
        "extract(epoch FROM locked_at - created_at) * 1000 FROM pqjobs_job "
        "WHERE status = 'done'"
    )
    values = [float(r[0]) for r in rows]
    claims = [float(r[1]) for r in rows]
    if len(values) < count:
        return [
            Result(
                "latency",
                0,
                "ms",
                "p50 <= 3, p99 <= 8",
                False,
                f"only {len(values)} of {count} jobs started",
            )
        ]
    p50, p99 = percentile(values, 50), percentile(values, 99)
    claimed = (
        f"enqueue -> claim p50 {percentile(claims, 50):.2f} ms, p99 {percentile(claims, 99):.2f} ms"
    )
    return [
        Result("latency: enqueue -> handler start p50", p50, "ms", "<= 3", p50 <= 3, claimed),
        Result("latency: enqueue -> handler start p99", p99, "ms", "<= 8", p99 <= 8),
    ]
