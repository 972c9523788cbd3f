"""Typed arguments (issue 31): what a dataclass-typed job costs against the same job with a
plain dict payload (>= 90 %), on enqueue and on the drain.

Enqueue: ``enqueue_job`` of ``tests.typed_noop`` with a ``Point`` instance (checked field
by field, stored as JSON) against ``enqueue_job`` of ``tests.noop`` with the same dict,
alternating rounds of 1,000. Drain: 20,000 of each enqueued first, then
``run_jobs --concurrency 4 --burst`` (the typed handler gets the payload rebuilt as a
``Point``), alternating; jobs / (last ``finished_at`` - first ``locked_at``).
"""

from __future__ import annotations

import statistics
import time

from django_pqjobs import enqueue_job, enqueue_many
from tests.testapp.jobs import Point

from ..harness import Result, reset_tables, sql, worker_process


def _enqueue_rate(typed: bool, count: int) -> float:
    started = time.perf_counter()
    for n in range(count):
        if typed:
            enqueue_job("tests.typed_noop", Point(n, n + 1, "p"))
        else:
            enqueue_job("tests.noop", {"x": n, "y": n + 1, "label": "p"})
    return count / (time.perf_counter() - started)


def _drain_rate(typed: bool, count: int) -> float:
    reset_tables()
    if typed:
        enqueue_many("tests.typed_noop", [Point(n, n + 1, "p") for n in range(count)])
    else:
        enqueue_many("tests.noop", [{"x": n, "y": n + 1, "label": "p"} for n in range(count)])
    sql("VACUUM ANALYZE pqjobs_job")
    with worker_process("--concurrency", "4", "--burst") as process:
        process.wait(600)
    (rate,) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0) "
        "FROM pqjobs_job WHERE status = 'done'"
    )[0]
    return float(rate or 0)


def run(quick: bool) -> list[Result]:
    rounds, per_round, drained = (3, 300, 5_000) if quick else (7, 1_000, 20_000)
    reset_tables()
    enqueues = [
        (_enqueue_rate(False, per_round), _enqueue_rate(True, per_round)) for _ in range(rounds)
    ]
    drains = [
        (_drain_rate(False, drained), _drain_rate(True, drained)) for _ in range(rounds // 2 + 1)
    ]
    reset_tables()
    enqueue_ratio = statistics.median(t / p for p, t in enqueues)
    drain_ratio = statistics.median(t / p for p, t in drains)
    return [
        Result(
            "typed arguments: enqueue_job of a dataclass no-op",
            statistics.median(t for _, t in enqueues),
            "jobs/s",
            ">= 90% of dict",
            enqueue_ratio >= 0.9,
            f"{enqueue_ratio:.0%} of the same job with a dict payload (median of {rounds} "
            f"alternating rounds of {per_round}; dict "
            f"{statistics.median(p for p, _ in enqueues):,.0f}/s)",
        ),
        Result(
            f"typed arguments: drain of {drained:,} dataclass no-ops",
            statistics.median(t for _, t in drains),
            "jobs/s",
            ">= 90% of dict",
            drain_ratio >= 0.9,
            f"{drain_ratio:.0%} of the same jobs with dict payloads (median of "
            f"{len(drains)} alternating pairs; dict "
            f"{statistics.median(p for p, _ in drains):,.0f}/s)",
        ),
    ]
