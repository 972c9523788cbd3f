"""Durable workflows (issue 30): what a workflow's steps cost, what a parked one holds, and
how soon a signal resumes one.

- Drain: 2,000 workflows of five no-op steps each (``tests.workflow_noop5``: each step
  read back and recorded, one row per step) against 10,000 plain no-op jobs, both drained by
  ``run_jobs --concurrency 4 --burst``, taking turns, 3 rounds; the workflows must take at
  most twice as long (>= 50 % of five plain jobs' rate).
- Parked: 1,000 workflows parked waiting for a signal beside an idle worker: no job
  running, and the worker holds no more database connections than once they all ran.
- A step against its floor: one step recorded (``pqjobs_record_step()``, its own
  transaction, as a worker sends it) against a prepared INSERT of a similar row + commit on
  the same kind of connection, committed with synchronous_commit as the server's default
  and, as a step is, without waiting for the WAL flush; taking turns in rounds in one run:
  p50 per step, and the ratio to the second <= 1.2.
- Signal to resume: an idle worker, 100 workflows parked on a signal; each signal sent 50
  ms apart, measured from just before ``send_signal`` to the handler's resumption
  (``time.time()`` in it, returned as the result): p50 <= 20 ms.
"""

from __future__ import annotations

import statistics
import time

from django_pqjobs import enqueue_many, send_signal

from ..harness import (
    Result,
    drain_seconds,
    percentile,
    raw_connection,
    reset_tables,
    sql,
    worker_process,
)

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
        running = sql("SELECT count(*) FROM pqjobs_job_hot WHERE status = 'running'")[0][0]
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


def _resume_failed(note: str) -> list[Result]:
    """The signal-to-resume result when its workflows did not all park or resume."""
    return [Result("workflows: signal -> resume p50", 0, "ms", "<= 20", False, note)]


_FLOOR_TABLE = """CREATE TABLE IF NOT EXISTS bench_step_floor (
    job_id bigint NOT NULL, name text NOT NULL, kind text NOT NULL, result jsonb,
    attempt integer NOT NULL, started_at timestamptz NOT NULL, finished_at timestamptz,
    wake_at timestamptz, PRIMARY KEY (job_id, name))"""
_FLOOR = (
    "INSERT INTO bench_step_floor (job_id, name, kind, result, attempt, started_at,"
    " finished_at, wake_at) VALUES (%s, %s, %s, %s::jsonb, 1, now(), now(),"
    " now() + make_interval(secs => %s))"
)
_STEP = "SELECT pqjobs_record_step(%s, %s, %s, %s, %s, %s::jsonb, %s, %s, %s)"


def _step_against_floor(quick: bool) -> Result:
    """p50 of one step's record against a prepared INSERT + commit, rounds taking turns.

    Two floors: the INSERT committed with the server's default synchronous_commit (waiting
    for the WAL flush), and the same INSERT committed as a step is, without waiting for it
    (a second connection with synchronous_commit off). The target is against the second:
    it leaves the function's own cost; the first shows what the asynchronous commit saves.
    """
    reset_tables()
    (job_id,) = enqueue_many("tests.noop", [{}])
    sql(
        "UPDATE pqjobs_job SET status = 'running', locked_by = 'bench', attempts = 1, "
        "locked_at = now() WHERE id = %s",
        [job_id],
    )
    per_round, rounds = (300, 4) if quick else (1_000, 6)
    steps: list[float] = []
    durable: list[float] = []
    unflushed: list[float] = []
    with raw_connection() as conn, raw_connection() as lazy:
        cursor, lazy_cursor = conn.cursor(), lazy.cursor()
        cursor.execute("DROP TABLE IF EXISTS bench_step_floor")
        cursor.execute(_FLOOR_TABLE)
        lazy_cursor.execute("SET synchronous_commit = off")
        for r in range(rounds):
            for floor, cur, prefix in ((durable, cursor, "d"), (unflushed, lazy_cursor, "u")):
                for i in range(per_round):
                    args = (job_id, f"{prefix}{r}_{i}", "step", "null", 0.0)
                    t = time.perf_counter()
                    cur.execute(_FLOOR, args, prepare=True)
                    floor.append(time.perf_counter() - t)
            for i in range(per_round):
                args2 = (job_id, "bench", 1, f"s{r}_{i}", "step", "null", True, 0.0, True)
                t = time.perf_counter()
                cursor.execute(_STEP, args2, prepare=True)
                recorded = cursor.fetchone()
                steps.append(time.perf_counter() - t)
                if not recorded or not recorded[0]:
                    raise RuntimeError("a step was not recorded: the fence did not match")
        cursor.execute("DROP TABLE bench_step_floor")
    step_us = percentile(steps, 50) * 1e6
    durable_us = percentile(durable, 50) * 1e6
    unflushed_us = percentile(unflushed, 50) * 1e6
    ratio = step_us / unflushed_us
    return Result(
        "workflows: one step recorded vs prepared INSERT + commit",
        ratio,
        "x floor",
        "<= 1.2x",
        ratio <= 1.2,
        f"step p50 {step_us:.0f} us; floor p50 {unflushed_us:.0f} us committed as a step is "
        f"(overhead {step_us - unflushed_us:+.0f} us), {durable_us:.0f} us waiting for the "
        f"WAL flush ({step_us / durable_us:.2f}x); {rounds} rounds of {per_round}, taking turns",
        {"step_p50_us": step_us, "floor_p50_us": unflushed_us, "durable_p50_us": durable_us},
    )


def _until(count: int, status: str) -> int:
    deadline = time.monotonic() + 120
    found = 0
    while time.monotonic() < deadline:
        found = sql("SELECT count(*) FROM pqjobs_job_hot WHERE status = %s", [status])[0][0]
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
        parked = _until(count, "waiting")
        if parked != count:  # (a signal sent before they parked is one reason)
            return _resume_failed(f"only {parked} of {count} parked waiting for the signal")
        time.sleep(4)  # let the worker reach its longest idle poll
        for job_id in ids:
            sent[job_id] = time.time()
            send_signal(job_id, "go")
            time.sleep(0.05)
        time.sleep(1)
    rows = sql("SELECT id, result::text::float8 FROM pqjobs_job_hot WHERE status = 'done'")
    values = [(float(resumed) - sent[int(job_id)]) * 1000 for job_id, resumed in rows]
    if len(values) < count:
        return _resume_failed(f"only {len(values)} of {count} resumed")
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
    step = _step_against_floor(quick)
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
        step,
    ]
    results += _resume_latency(quick)
    reset_tables()
    return results
