"""Sequences (issue 28): the drain of sequenced jobs, 1,000 keys x 20 jobs, against the same
jobs unsequenced (>= 80 %).

Each round enqueues 20,000 ``tests.noop`` jobs, 20 per key, in rounds over the keys (the way
a stream of events per account arrives), with ``sequence=`` or without, then drains them
with ``run_jobs --concurrency 4`` (a listening worker: a sequenced job becomes ready when the
one before it finishes, which ``--burst`` could mistake for an empty queue). The rate is the
jobs over the span from the first claim to the last finish. Rounds alternate, so both see
the machine's drift.
"""

from __future__ import annotations

import statistics

from django_pqjobs import enqueue_job, enqueue_many

from ..harness import Result, reset_tables, sql, wait_until, worker_process

ROUNDS = 5


def drain_rate(keys: int, per_key: int, sequenced: bool) -> float:
    reset_tables()
    if sequenced:
        for n in range(per_key):
            for key in range(keys):
                enqueue_job("tests.noop", {"k": key, "n": n}, sequence=f"k:{key}")
    else:
        payloads = [{"k": key, "n": n} for n in range(per_key) for key in range(keys)]
        enqueue_many("tests.noop", payloads)
    sql("VACUUM ANALYZE pqjobs_job")
    total = keys * per_key
    with worker_process("--concurrency", "4"):
        finished = wait_until(
            lambda: sql("SELECT count(*) FROM pqjobs_job_hot WHERE status = 'done'")[0][0] == total,
            timeout=600,
            interval=0.2,
        )
    if not finished:
        raise RuntimeError("the drain did not finish within 600 s")
    (rate,) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0) "
        "FROM pqjobs_job_hot"
    )[0]
    return float(rate or 0)


def run(quick: bool) -> list[Result]:
    keys, per_key = (200, 10) if quick else (1_000, 20)
    pairs = [
        (drain_rate(keys, per_key, False), drain_rate(keys, per_key, True)) for _ in range(ROUNDS)
    ]
    reset_tables()
    ratios = [s / p for p, s in pairs]
    ratio = statistics.median(ratios)
    return [
        Result(
            f"sequences: drain of {keys:,} keys x {per_key} sequenced jobs",
            statistics.median(s for _, s in pairs),
            "jobs/s",
            ">= 80% of unsequenced",
            ratio >= 0.8,
            f"{ratio:.0%} of the same jobs unsequenced (median of {ROUNDS} alternating pairs, "
            f"{min(ratios):.0%}-{max(ratios):.0%}; unsequenced "
            f"{statistics.median(p for p, _ in pairs):,.0f}/s)",
        )
    ]
