"""Unique jobs: what ``unique_for`` costs an enqueue (issue 28: >= 85 % of a plain one).

Rounds alternate, so both see the machine's drift: ``enqueue_job`` of new payloads plain,
and the same with ``unique_for="1h"`` (a key derived from each payload, the window's end
computed in the INSERT, the unique index's ON CONFLICT). The duplicate's path is measured
too: the same payload enqueued again, answered with the existing id (an INSERT that meets
the index, then the lookup of the job holding the key).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from django_pqjobs import enqueue_job

from ..harness import Result, reset_tables


def _rate(first: int, count: int, enqueue_one: Callable[[int], object]) -> float:
    started = time.perf_counter()
    for n in range(first, first + count):
        enqueue_one(n)
    return count / (time.perf_counter() - started)


def _plain(n: int) -> None:
    enqueue_job("tests.noop", {"n": n})


def _unique(n: int) -> None:
    enqueue_job("tests.noop", {"u": n}, unique_for="1h")


def run(quick: bool) -> list[Result]:
    reset_tables()
    rounds, per_round = (5, 400) if quick else (9, 1_000)
    plain: list[float] = []
    unique: list[float] = []
    duplicate: list[float] = []
    for r in range(rounds):
        first = r * per_round
        plain.append(_rate(first, per_round, _plain))
        unique.append(_rate(first, per_round, _unique))
        duplicate.append(_rate(first, per_round, lambda _: _unique(first)))  # noqa: B023
    reset_tables()
    ratios = [u / p for u, p in zip(unique, plain, strict=True)]
    ratio = statistics.median(ratios)
    return [
        Result(
            "enqueue_job, plain (reference of this scenario)",
            statistics.median(plain),
            "jobs/s",
            "-",
            None,
            notes=f"median of {rounds} rounds of {per_round}; "
            f"rounds {min(plain):.0f}-{max(plain):.0f}",
        ),
        Result(
            "enqueue_job with unique_for='1h', new payloads",
            ratio * 100,
            "% of plain",
            ">= 85",
            ratio >= 0.85,
            notes=f"{statistics.median(unique):.0f} jobs/s; per-round ratios "
            f"{min(ratios):.0%}-{max(ratios):.0%}",
        ),
        Result(
            "enqueue_job with unique_for='1h', a duplicate (answered with the existing id)",
            statistics.median(duplicate),
            "enqueues/s",
            "-",
            None,
            notes=f"{statistics.median(duplicate) / statistics.median(plain):.0%} of a plain "
            "enqueue's rate (no commit to wait for, one lookup more)",
        ),
    ]
