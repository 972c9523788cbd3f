"""Mixed workload: N processes enqueue (one ``enqueue_job`` per transaction) while M worker
processes drain, the load a web application puts on its queue.

Rounds of phases on the same machine, taking turns (enqueue alone first in even rounds,
last in odd ones): the N enqueuers alone, then the same enqueuers while the
M workers (``run_jobs --concurrency 4``, default verbosity) run what they enqueue. This
machine's speed drifts by ±30 % over minutes, so each round's mixed rate is compared with
the enqueuers alone in the same round, and the figure is the median of the rounds' ratios.
Beside them, once: the M workers alone (``--burst``) on a backlog of the same size. And in
each round a third phase, the floor: the same enqueuers while M processes of
``benchmarks.floor_worker`` (the claim and completion statements in a loop, in the same
turns, nothing else) stand in for ``run_jobs``: how close the state machine itself lets a
worker come to the target on this machine.

The mixed rate is jobs / (last finished - first enqueued), on the database clock; latency is
enqueue (``created_at``) to handler start (the handler returns ``time.time()``). Target: the
mixed rate >= 80 % of the slower alone (the enqueuers: the workers alone drain several times
faster), with a latency p50 under 10 ms.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from contextlib import ExitStack

from django_pqjobs import enqueue_many

from ..harness import (
    ROOT,
    Result,
    percentile,
    reset_tables,
    sql,
    stop_process,
    wait_until,
    worker_process,
)

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
    (span,) = sql(
        "SELECT extract(epoch FROM max(created_at) - min(created_at)) FROM pqjobs_job_hot"
    )[0]
    return total / float(span or seconds)


def drain_alone(jobs: int) -> float:
    reset_tables()
    enqueue_many("tests.noop", [{}] * jobs)
    with ExitStack() as stack:
        processes = [
            stack.enter_context(worker_process("--concurrency", "4", "--burst"))
            for _ in range(WORKERS)
        ]
        for process in processes:
            process.wait(600)
    (rate,) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0) "
        "FROM pqjobs_job_hot WHERE status = 'done'"
    )[0]
    return float(rate or 0)


def floor_process(place: int) -> subprocess.Popen:
    command = [sys.executable, "-m", "benchmarks.floor_worker", str(place), str(WORKERS)]
    return subprocess.Popen(command, cwd=ROOT)


def mixed(seconds: float, floor: bool = False) -> tuple[float, list[float], list[float], int]:
    reset_tables()
    with ExitStack() as stack:
        if floor:
            for place in range(WORKERS):
                stack.callback(stop_process, floor_process(place))
            time.sleep(2)  # connected and taking turns
        else:
            for _ in range(WORKERS):
                stack.enter_context(worker_process("--concurrency", "4"))
            wait_until(lambda: sql("SELECT count(*) FROM pqjobs_worker")[0][0] >= WORKERS, 60)
            time.sleep(2)  # every listener is listening
        total = counts(enqueue_for(seconds, ENQUEUERS))
        wait_until(
            lambda: sql("SELECT count(*) FROM pqjobs_job_hot WHERE status = 'done'")[0][0] >= total,
            120,
            0.2,
        )
    rows = sql(
        "SELECT (result::text::float8 - extract(epoch FROM created_at)) * 1000, "
        "extract(epoch FROM locked_at - created_at) * 1000 FROM pqjobs_job_hot "
        "WHERE status = 'done'"
    )
    (span,) = sql(
        "SELECT extract(epoch FROM max(finished_at) - min(created_at)) FROM pqjobs_job_hot "
        "WHERE status = 'done'"
    )[0]
    rate = len(rows) / float(span or seconds)
    return rate, [float(r[0]) for r in rows], [float(r[1]) for r in rows], total


def run(quick: bool) -> list[Result]:
    # Single rounds move by ±10 points on this machine: five of them for a median that holds.
    seconds, rounds = (6.0, 2) if quick else (10.0, 5)
    alone_rates: list[float] = []
    mixed_rates: list[float] = []
    ratios: list[float] = []
    p50s: list[float] = []
    p99s: list[float] = []
    claim_p50s: list[float] = []
    floor_ratios: list[float] = []
    floor_p50s: list[float] = []
    lost = 0
    for n in range(rounds):
        phases = ("alone", "mixed", "floor") if n % 2 == 0 else ("floor", "mixed", "alone")
        for phase in phases:
            if phase == "alone":
                alone = enqueue_alone(seconds)
            elif phase == "floor":
                floor_rate, floor_latency, _, _ = mixed(seconds, floor=True)
                floor_p50s.append(percentile(floor_latency, 50) if floor_latency else float("inf"))
            else:
                rate, latency, claim, total = mixed(seconds)
                lost += total - len(latency)
                p50s.append(percentile(latency, 50) if latency else float("inf"))
                p99s.append(percentile(latency, 99) if latency else float("inf"))
                claim_p50s.append(percentile(claim, 50) if claim else float("inf"))
        alone_rates.append(alone)
        mixed_rates.append(rate)
        ratios.append(rate / alone)
        floor_ratios.append(floor_rate / alone)
    alone_drain = drain_alone(int(statistics.median(alone_rates) * seconds))
    ratio = statistics.median(ratios)
    p50 = statistics.median(p50s)
    shape = f"{ENQUEUERS} enqueuing processes, {WORKERS} run_jobs --concurrency 4"
    per_round = ", ".join(
        f"{m:.0f}/{a:.0f} ({m / a:.0%}, p50 {p:.1f} ms)"
        for m, a, p in zip(mixed_rates, alone_rates, p50s, strict=True)
    )
    slower = "the enqueuers" if statistics.median(alone_rates) <= alone_drain else "the workers"
    return [
        Result(
            f"mixed: enqueue alone ({ENQUEUERS} processes)",
            statistics.median(alone_rates),
            "jobs/s",
            "-",
            None,
            f"median of {rounds} rounds: " + ", ".join(f"{a:.0f}" for a in alone_rates),
        ),
        Result(f"mixed: drain alone ({WORKERS} workers)", alone_drain, "jobs/s", "-", None),
        Result(
            f"mixed: {shape}, end to end",
            statistics.median(mixed_rates),
            "jobs/s",
            ">= 80% of slower",
            lost == 0 and ratio >= 0.8,
            f"median {ratio:.0%} of {slower} alone in the same round; per round mixed/alone "
            f"{per_round}; {lost} jobs not done; p99 {statistics.median(p99s):.1f} ms, "
            f"enqueue -> claim p50 {statistics.median(claim_p50s):.1f} ms",
            {"ratios": ratios, "p50_ms": p50s, "p99_ms": p99s, "lost": lost},
        ),
        Result("mixed: latency enqueue -> handler start p50", p50, "ms", "< 10", p50 < 10),
        Result(
            "mixed: the floor (benchmarks.floor_worker in place of run_jobs), share of alone",
            statistics.median(floor_ratios) * 100,
            "%",
            "-",
            None,
            "per round "
            + ", ".join(f"{r:.0%}" for r in floor_ratios)
            + f"; p50 {statistics.median(floor_p50s):.1f} ms",
            {"ratios": floor_ratios, "p50_ms": floor_p50s},
        ),
    ]
