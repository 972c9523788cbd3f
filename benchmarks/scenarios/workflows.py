"""Durable workflows (issue 30): what a workflow's steps cost, what a parked one holds, and
how soon a signal resumes one.

- Drain: 2,000 workflows of five no-op steps each (``tests.workflow_noop5``: each step
  read back and recorded, one row per step) against 10,000 plain no-op jobs, both drained by
  ``run_jobs --concurrency 4 --burst``, taking turns, 3 rounds; the workflows must take at
  most twice as long (>= 50 % of five plain jobs' rate).
- Parked: 1,000 workflows parked waiting for a signal beside an idle worker: no job
  running, and the worker holds no more database connections than once they all ran.
- Signal to resume: an idle worker, 100 workflows parked on a signal; each signal sent 50
  ms apart, measured from just before ``send_signal`` to the handler's resumption
  (``time.time()`` in it, returned as the result): p50 <= 20 ms.
"""

from __future__ import annotations

import statistics
import time

from django_pqjobs import enqueue_many, send_signal

from ..harness import Result, drain_seconds, percentile, reset_tables, sql, worker_process

WORKFLOWS, STEPS = 2_000, 5


def _connections() -> int:
    """The sessions of the benchmark's database other than this process's."""
    return int(
        sql(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
        )[0][0]
    )


def _parked(quick: bool) -> Result:
    """Connections and running jobs with ``count`` workflows parked, against the same
    worker once they all finished (its threads have then run as many jobs)."""
    reset_tables()
    count = 300 if quick else 1_000
    ids = enqueue_many("tests.workflow_resumed_at", [{}] * count)
    with worker_process("--concurrency", "4"):
        parked = _until(count, "waiting")
        time.sleep(2)
        running = sql("SELECT count(*) FROM pqjobs_job WHERE status = 'running'")[0][0]
        held = _connections()
        for job_id in ids:
            send_signal(job_id, "go")
        _until(count, "done")
        time.sleep(2)
        after = _connections()
    ok = parked == count and running == 0 and held <= after
    return Result(
        f"workflows: {count:,} parked beside an idle worker",
        running,
        "running",
        "0 running, no connection more",
        ok,
        f"{parked:,} parked: {held} connections of the worker, {after} once they all ran",
    )


def _until(count: int, status: str) -> int:
    deadline = time.monotonic() + 120
    found = 0
    while time.monotonic() < deadline:
        found = sql("SELECT count(*) FROM pqjobs_job WHERE status = %s", [status])[0][0]
        if found == count:
            break
        time.sleep(0.2)
    return int(found)


def _resume_latency(quick: bool) -> list[Result]:
    reset_tables()
    count = 50 if quick else 100
    ids = enqueue_many("tests.workflow_resumed_at", [{}] * count)
    sent: dict[int, float] = {}
    with worker_process("--concurrency", "4"):
        _until(count, "waiting")
        time.sleep(4)  # let the worker reach its longest idle poll
        for job_id in ids:
            sent[job_id] = time.time()
            send_signal(job_id, "go")
            time.sleep(0.05)
        time.sleep(1)
    rows = sql("SELECT id, result::text::float8 FROM pqjobs_job WHERE status = 'done'")
    values = [(float(resumed) - sent[int(job_id)]) * 1000 for job_id, resumed in rows]
    if len(values) < count:
        return [
            Result(
                "workflows: signal -> resume p50",
                0,
                "ms",
                "<= 20",
                False,
                f"only {len(values)} of {count} resumed",
            )
        ]
    p50, p99 = percentile(values, 50), percentile(values, 99)
    return [
        Result(
            "workflows: signal -> resume p50",
            p50,
            "ms",
            "<= 20",
            p50 <= 20,
            f"p99 {p99:.1f} ms; from before send_signal() to the handler's resumption, "
            f"{count} signals 50 ms apart, idle worker",
        )
    ]


def run(quick: bool) -> list[Result]:
    count = 500 if quick else WORKFLOWS
    rounds = []
    for _ in range(2 if quick else 3):
        plain = drain_seconds("tests.noop", [{}] * (count * STEPS))
        flows = drain_seconds("tests.workflow_noop5", [{}] * count)
        rounds.append((plain, flows))
    ratio = statistics.median(plain / flows for plain, flows in rounds)
    flows_rate = statistics.median(count / flows for _, flows in rounds)
    plain_rate = statistics.median(count * STEPS / plain for plain, _ in rounds)
    results = [
        Result(
            f"workflows: drain of {count:,} five-step workflows",
            flows_rate,
            "workflows/s",
            ">= 50% of 5 plain jobs",
            ratio >= 0.5,
            f"{ratio:.0%} of the rate of five plain no-op jobs each ({plain_rate:,.0f} plain "
            f"jobs/s; median of {len(rounds)} rounds, taking turns)",
        ),
        _parked(quick),
    ]
    results += _resume_latency(quick)
    reset_tables()
    return results
