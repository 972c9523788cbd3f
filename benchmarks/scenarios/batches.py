"""Batches and dependencies: what composition costs, against plain jobs in the same run.

- *enqueue*: ``enqueue_batch()`` of 10,000 members with a callback, against
  ``enqueue_many()`` of the same 10,000 plain jobs (alternating rounds).
- *drain*: the 10,000 members drained by ``run_jobs --concurrency 4 --burst``, against the
  same drain of plain jobs (alternating rounds).
- *callback*: from the commit that finished the batch's last member to the start of its
  callback's handler, with a worker that listens (``run_jobs --concurrency 4``).
- *plain jobs*: the no-op drain with the composition triggers in place, against the same
  drain with them disabled (``ALTER TABLE ... DISABLE TRIGGER``): what jobs without batch
  or dependency pay for the feature (their WHEN clauses are false).
"""

from __future__ import annotations

import statistics
import time

from django_pqjobs import enqueue_batch, enqueue_many

from ..harness import Result, reset_tables, sql, worker_process

ROUNDS = 5
COMPOSITION_TRIGGERS = ("pqjobs_job_composed_status", "pqjobs_job_composed_deleted")


def enqueue_rate(members: int, as_batch: bool) -> float:
    reset_tables()
    began = time.perf_counter()
    if as_batch:
        enqueue_batch("tests.noop", [{}] * members, on_success="tests.started_at")
    else:
        enqueue_many("tests.noop", [{}] * members)
    return members / (time.perf_counter() - began)


def drain_rate(members: int, as_batch: bool) -> float:
    reset_tables()
    if as_batch:
        enqueue_batch("tests.noop", [{}] * members, on_finish="tests.noop")
    else:
        enqueue_many("tests.noop", [{}] * members)
    sql("VACUUM ANALYZE pqjobs_job")
    with worker_process("--concurrency", "4", "--burst") as process:
        process.wait(600)
    (rate,) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0) "
        "FROM pqjobs_job_hot WHERE job_type = 'tests.noop' AND callback_of_id IS NULL"
    )[0]
    return float(rate or 0)


def plain_drain(jobs: int, triggers: bool) -> float:
    action = "ENABLE" if triggers else "DISABLE"
    for name in COMPOSITION_TRIGGERS:
        sql(f"ALTER TABLE pqjobs_job {action} TRIGGER {name}")
    try:
        return drain_rate(jobs, as_batch=False)
    finally:
        for name in COMPOSITION_TRIGGERS:
            sql(f"ALTER TABLE pqjobs_job ENABLE TRIGGER {name}")


def callback_latency_ms(members: int) -> float:
    """Milliseconds from the last member's finish to the callback's handler starting."""
    reset_tables()
    with worker_process("--concurrency", "4"):
        time.sleep(2)  # started and listening
        opened = enqueue_batch("tests.noop", [{}] * members, on_success="tests.started_at")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            rows = sql(
                "SELECT result FROM pqjobs_job_hot WHERE callback_of_id = %s AND status = 'done'",
                [opened.id],
            )
            if rows:
                break
            time.sleep(0.05)
        else:
            raise RuntimeError("the callback did not run within 120 s")
    ((started,),) = rows
    ((last_finished,),) = sql(
        "SELECT extract(epoch FROM max(finished_at)) FROM pqjobs_job_hot WHERE batch_id = %s",
        [opened.id],
    )
    return (float(started) - float(last_finished)) * 1000


def run(quick: bool) -> list[Result]:
    members = 10_000
    enqueue_pairs = [
        (enqueue_rate(members, False), enqueue_rate(members, True)) for _ in range(ROUNDS)
    ]
    enqueue_ratio = statistics.median(b / p for p, b in enqueue_pairs)
    batch_enqueue = statistics.median(b for _, b in enqueue_pairs)
    plain_enqueue = statistics.median(p for p, _ in enqueue_pairs)
    drain_rounds = 3 if quick else ROUNDS
    drain_pairs = [
        (drain_rate(members, False), drain_rate(members, True)) for _ in range(drain_rounds)
    ]
    drain_ratio = statistics.median(b / p for p, b in drain_pairs)
    latencies = [callback_latency_ms(1_000 if quick else members) for _ in range(drain_rounds)]
    plain_pairs = [
        (plain_drain(members, False), plain_drain(members, True)) for _ in range(drain_rounds)
    ]
    plain_ratio = statistics.median(w / wo for wo, w in plain_pairs)
    return [
        Result(
            f"batches: enqueue_batch of {members:,} members",
            batch_enqueue,
            "jobs/s",
            ">= 30,000",
            batch_enqueue >= 30_000,
            f"{enqueue_ratio:.0%} of enqueue_many of the same jobs (median of {ROUNDS} "
            f"alternating pairs; enqueue_many {plain_enqueue:,.0f}/s)",
        ),
        Result(
            f"batches: drain of a {members:,}-member batch",
            statistics.median(b for _, b in drain_pairs),
            "jobs/s",
            ">= 90% of plain",
            drain_ratio >= 0.9,
            f"{drain_ratio:.0%} of the plain no-op drain (median of {drain_rounds} alternating "
            f"pairs; plain {statistics.median(p for p, _ in drain_pairs):,.0f}/s)",
        ),
        Result(
            "batches: last member finished -> callback started",
            statistics.median(latencies),
            "ms",
            "<= 100",
            statistics.median(latencies) <= 100,
            f"median of {drain_rounds} batches; max {max(latencies):.0f} ms",
        ),
        Result(
            "batches: plain drain with the composition triggers",
            statistics.median(w for _, w in plain_pairs),
            "jobs/s",
            ">= 95% of without",
            plain_ratio >= 0.95,
            f"{plain_ratio:.0%} of the same drain with the triggers disabled (median of "
            f"{drain_rounds} alternating pairs)",
        ),
    ]
