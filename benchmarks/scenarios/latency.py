"""Latency: an idle worker, jobs enqueued one at a time 20 ms apart.

Measured on the database clock from the INSERT (created_at) to the claim (locked_at), the
moment the worker takes the job for an executor.
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
            enqueue_job("tests.noop")
            time.sleep(0.02)
        time.sleep(1)
    rows = sql(
        "SELECT extract(epoch FROM locked_at - created_at) * 1000 FROM pqjobs_job "
        "WHERE locked_at IS NOT NULL"
    )
    values = [float(r[0]) for r in rows]
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
    return [
        Result("latency: enqueue -> claim p50", p50, "ms", "<= 3", p50 <= 3),
        Result("latency: enqueue -> claim p99", p99, "ms", "<= 8", p99 <= 8),
    ]
