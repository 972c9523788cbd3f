"""Enqueue: one ``enqueue_job`` per transaction from one thread, and the bulk form."""

from __future__ import annotations

import time

from django_pqjobs import enqueue_job, enqueue_many

from ..harness import Result, reset_tables


def run(quick: bool) -> list[Result]:
    reset_tables()
    single = 2_000 if quick else 5_000
    started = time.perf_counter()
    for n in range(single):
        enqueue_job("tests.noop", {"n": n})
    single_rate = single / (time.perf_counter() - started)
    reset_tables()
    bulk = 50_000 if quick else 100_000
    started = time.perf_counter()
    for offset in range(0, bulk, 10_000):
        enqueue_many("tests.noop", [{"n": n} for n in range(offset, offset + 10_000)])
    bulk_rate = bulk / (time.perf_counter() - started)
    reset_tables()
    return [
        Result(
            "enqueue_job, one per transaction",
            single_rate,
            "jobs/s",
            ">= 2000",
            single_rate >= 2000,
        ),
        Result(
            "enqueue_many, batches of 10,000", bulk_rate, "jobs/s", ">= 50000", bulk_rate >= 50_000
        ),
    ]
