"""Mixed workload: N processes enqueue (one ``enqueue_job`` per transaction) while M worker
processes drain, the load a web application puts on its queue.

Three phases on the same machine, one after the other: enqueue alone (the N enqueuers, no
worker), drain alone (the M workers, ``--burst``, on a backlog of the same size), then both
at once for the same time. The mixed rate is jobs / (last finished - first enqueued), on
the database clock; latency is enqueue (``created_at``) to handler start (the handler
returns ``time.time()``). Target: the mixed rate >= 80 % of the slower phase alone, with a
latency p50 under 10 ms.
"""

from __future__ import annotations

import subprocess
import sys
import time

from django_pqjobs import enqueue_many

from ..harness import ROOT, Result, percentile, reset_tables, sql, wait_until, worker_process

ENQUEUERS = 4
WORKERS = 4


def enqueue_for(seconds: float, processes: int) -> list[subprocess.Popen]:
    command = [sys.executable, "-m", "benchmarks.enqueuer", str(seconds)]
    return [
        subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]


def counts(enqueuers: list[subprocess.Popen]) -> int:
    return sum(int(p.communicate(timeout=120)[0].strip() or 0) for p in enqueuers)


def enqueue_alone(seconds: float) -> float:
    reset_tables()
    enqueuers = enqueue_for(seconds, ENQUEUERS)
    total = counts(enqueuers)
    (span,) = sql("SELECT extract(epoch FROM max(created_at) - min(created_at)) FROM pqjobs_job")[0]
    return total / float(span or seconds)


def drain_alone(jobs: int) -> float:
    reset_tables()
    enqueue_many("tests.noop", [{}] * jobs)
    from contextlib import ExitStack

    with ExitStack() as stack:
        processes = [
            stack.enter_context(worker_process("--concurrency", "4", "--burst"))
            for _ in range(WORKERS)
        ]
        for process in processes:
            process.wait(600)
    (rate,) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0) "
        "FROM pqjobs_job WHERE status = 'done'"
    )[0]
    return float(rate or 0)


def mixed(seconds: float) -> tuple[float, list[float], list[float], int]:
    reset_tables()
    from contextlib import ExitStack

    with ExitStack() as stack:
        for _ in range(WORKERS):
            stack.enter_context(worker_process("--concurrency", "4"))
        wait_until(lambda: sql("SELECT count(*) FROM pqjobs_worker")[0][0] >= WORKERS, 60)
        time.sleep(2)  # every listener is listening
        total = counts(enqueue_for(seconds, ENQUEUERS))
        wait_until(
            lambda: sql("SELECT count(*) FROM pqjobs_job WHERE status = 'done'")[0][0] >= total,
            120,
            0.2,
        )
    rows = sql(
        "SELECT (result::text::float8 - extract(epoch FROM created_at)) * 1000, "
        "extract(epoch FROM locked_at - created_at) * 1000 FROM pqjobs_job WHERE status = 'done'"
    )
    (span,) = sql(
        "SELECT extract(epoch FROM max(finished_at) - min(created_at)) FROM pqjobs_job "
        "WHERE status = 'done'"
    )[0]
    rate = len(rows) / float(span or seconds)
    return rate, [float(r[0]) for r in rows], [float(r[1]) for r in rows], total


def run(quick: bool) -> list[Result]:
    seconds = 8.0 if quick else 20.0
    alone_enqueue = enqueue_alone(seconds)
    alone_drain = drain_alone(int(alone_enqueue * seconds))
    rate, latency, claim, total = mixed(seconds)
    slower = min(alone_enqueue, alone_drain)
    p50 = percentile(latency, 50) if latency else float("inf")
    p99 = percentile(latency, 99) if latency else float("inf")
    claim_p50 = percentile(claim, 50) if claim else float("inf")
    ok = len(latency) == total and rate >= 0.8 * slower and p50 < 10
    shape = f"{ENQUEUERS} enqueuing processes, {WORKERS} run_jobs --concurrency 4"
    return [
        Result(f"mixed: enqueue alone ({ENQUEUERS} processes)", alone_enqueue, "jobs/s", "-", None),
        Result(f"mixed: drain alone ({WORKERS} workers)", alone_drain, "jobs/s", "-", None),
        Result(
            f"mixed: {shape}, end to end",
            rate,
            "jobs/s",
            ">= 80% of slower",
            ok,
            f"{rate / slower:.0%} of the slower alone ({slower:.0f}/s); {total} jobs, "
            f"{len(latency)} done; latency p50 {p50:.1f} ms, p99 {p99:.1f} ms "
            f"(enqueue -> claim p50 {claim_p50:.1f} ms)",
            {"p50_ms": p50, "p99_ms": p99, "jobs": total, "done": len(latency)},
        ),
        Result("mixed: latency enqueue -> handler start p50", p50, "ms", "< 10", p50 < 10),
    ]
