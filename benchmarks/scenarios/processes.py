"""Processes: the same drain by one ``run_jobs --concurrency 4 --burst`` process and by
``run_jobs --processes 2 --concurrency 2 --burst`` (the same four executor threads, in two
Python processes). Rounds alternate; the figure is the median of the per-round ratios.
"""

from __future__ import annotations

import statistics

from django_pqjobs import enqueue_many

from ..harness import Result, reset_tables
from .drain import drain_rate

TARGET = 1.2  # two processes on a 2-core machine, against one with the same threads


def run(quick: bool) -> list[Result]:
    jobs = 10_000 if quick else 20_000
    rounds = 2 if quick else 3
    one: list[float] = []
    two: list[float] = []
    failures: list[dict] = []
    for _ in range(rounds):
        for rates, flags in ((one, ()), (two, ("--processes", "2", "--concurrency", "2"))):
            reset_tables()
            enqueue_many("tests.noop", [{}] * jobs)
            rate, checks = drain_rate(jobs, *flags)
            if not (checks["done"] == jobs == checks["complete_rows"] and not checks["exit_code"]):
                failures.append({"flags": flags, **checks})
            rates.append(rate)
    ratio = statistics.median(b / a for a, b in zip(one, two, strict=True) if a)
    integrity = "" if not failures else f"; integrity check failed: {failures}"
    return [
        Result(
            f"processes: drain of {jobs} no-op jobs, --processes 2 --concurrency 2 vs one "
            "process --concurrency 4",
            ratio,
            "x",
            f">= {TARGET}",
            not failures and ratio >= TARGET,
            f"median of {rounds} alternating pairs; one process {statistics.median(one):.0f}/s, "
            f"two {statistics.median(two):.0f}/s{integrity}",
            {"one": one, "two": two},
        )
    ]
