"""Processes: the same drain by one ``run_jobs --concurrency 4 --burst`` process and by
``run_jobs --processes 2 --concurrency 2 --burst`` (the same four executor threads, in two
Python processes). Rounds alternate; the figure is the median of the per-round ratios.

Then the CPU a job costs, in the worker processes and in the PostgreSQL server, over the
drain alone (not the workers' start): the jobs are enqueued due a few seconds later, the
workers (listening, not ``--burst``) start and settle, and the CPU used is read just
before the jobs fall due and again once the last is done. Their sum is what a job costs a
host, so a drain that only CPU limits tops out at cores / that sum: the rate measured here
against this machine's ceiling shows how near it runs, and the same sum gives a projection
for 16 and 64 cores (an upper bound: docs/benchmarks.md says what it leaves out).
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import timedelta

from django.utils import timezone

from django_pqjobs import enqueue_many

from ..harness import (
    Result,
    reset_tables,
    server_cpu_seconds,
    sql,
    tree_cpu_seconds,
    worker_process,
)
from .drain import drain_rate

TARGET = 1.2  # two processes on a 2-core machine, against one with the same threads
PROJECTED_CORES = (16, 64)
SETTLE = 4.0  # seconds for the workers to start before the jobs fall due

# beyond run_jobs --concurrency 4 (a later --concurrency wins)
CONFIGURATIONS: dict[str, tuple[str, ...]] = {
    "one": (),
    "two": ("--processes", "2", "--concurrency", "2"),
}


def cpu_per_job(jobs: int, flags: tuple[str, ...]) -> tuple[float, float, float, float]:
    """(worker µs, server µs, jobs/s, WAL bytes) per job for a drain of ``jobs`` no-op jobs
    by ``run_jobs --concurrency 4 *flags``, counting only what was used from just before
    they fall due to the last done."""
    reset_tables()
    due = timezone.now() + timedelta(seconds=SETTLE)
    enqueue_many("tests.noop", [{}] * jobs, run_after=due)
    sql("VACUUM ANALYZE pqjobs_job")
    with worker_process("--concurrency", "4", *flags) as process:
        time.sleep(max(0.0, (due - timezone.now()).total_seconds() - 0.3))
        workers, server = tree_cpu_seconds(process.pid), server_cpu_seconds()
        ((wal,),) = sql("SELECT pg_current_wal_lsn()::text")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            if sql("SELECT count(*) FROM pqjobs_job_hot WHERE status = 'done'")[0][0] == jobs:
                break
            time.sleep(0.05)
        workers = tree_cpu_seconds(process.pid) - workers
        server = server_cpu_seconds() - server
        ((wal_bytes,),) = sql("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", [wal])
    ((rate,),) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0) "
        "FROM pqjobs_job_hot WHERE status = 'done'"
    )
    return workers / jobs * 1e6, server / jobs * 1e6, float(rate or 0), float(wal_bytes) / jobs


def run(quick: bool) -> list[Result]:
    jobs = 10_000 if quick else 20_000
    rounds = 2 if quick else 3
    rates: dict[str, list[float]] = {name: [] for name in CONFIGURATIONS}
    failures: list[dict] = []
    for _ in range(rounds):
        for name, flags in CONFIGURATIONS.items():
            reset_tables()
            enqueue_many("tests.noop", [{}] * jobs)
            rate, checks = drain_rate(jobs, *flags)
            if not (checks["done"] == jobs == checks["complete_rows"] and not checks["exit_code"]):
                failures.append({"flags": flags, **checks})
            rates[name].append(rate)
    one, two = rates["one"], rates["two"]
    ratio = statistics.median(b / a for a, b in zip(one, two, strict=True) if a)
    integrity = "" if not failures else f"; integrity check failed: {failures}"

    cpu: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in CONFIGURATIONS}
    for _ in range(rounds):
        for name, flags in CONFIGURATIONS.items():
            cpu[name].append(cpu_per_job(jobs, flags))
    per_job = {
        name: tuple(statistics.median(sample[n] for sample in samples) for n in range(4))
        for name, samples in cpu.items()
    }
    workers_us, server_us, listening_rate, wal_bytes = per_job["two"]
    total_us = workers_us + server_us
    cores = os.cpu_count() or 1
    ceiling = cores * 1e6 / total_us
    projected = ", ".join(
        f"{n} cores {n * 1e6 / total_us:,.0f}/s (WAL {n * 1e6 / total_us * wal_bytes / 1e6:,.0f} "
        "MB/s)"
        for n in PROJECTED_CORES
    )
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
        ),
        Result(
            "processes: CPU per job, workers + PostgreSQL (--processes 2)",
            total_us,
            "µs/job",
            "-",
            None,
            f"workers {workers_us:.0f} µs, PostgreSQL {server_us:.0f} µs (one process: "
            f"{per_job['one'][0]:.0f} + {per_job['one'][1]:.0f} µs); {wal_bytes:,.0f} bytes "
            f"of WAL a job; medians of {rounds} listening drains, the drain alone",
            {"cpu": cpu},
        ),
        Result(
            "processes: CPU-bound ceiling, from the CPU per job",
            ceiling,
            "jobs/s",
            "-",
            None,
            f"{cores} cores here: those drains ran at {listening_rate:,.0f}/s, "
            f"{listening_rate / ceiling:.0%} of it; projected (CPU only, an upper bound): "
            f"{projected}",
        ),
    ]
