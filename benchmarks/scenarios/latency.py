"""Latency: an idle worker, jobs enqueued one at a time 20 ms apart, against the raw
LISTEN/NOTIFY floor measured in the same run.

Measured from the INSERT (``created_at``, database clock) to the moment the handler
starts (``time.time()`` in the handler, returned as the job's result); the database and the
worker share this machine's clock. Rounds take turns: ``run_jobs`` (as users run it), the
floor (``benchmarks/notify_floor.py``: one connection that LISTENs, claims with one UPDATE
and records, on a plain table, the enqueue one INSERT that notifies), and ``run_jobs``
under ``benchmarks/probed.py``, whose marks split the time into stages. The figures are
the medians of the rounds' percentiles; the targets are ratios to the floor's.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from django_pqjobs import enqueue_job

from ..harness import (
    ROOT,
    Result,
    backend_cpu_seconds,
    percentile,
    raw_connection,
    reset_tables,
    sql,
    wait_until,
    worker_process,
)
from ..notify_floor import CHANNEL, CLAIM, CREATE, ENQUEUE, TABLE

SPACING = 0.02
IDLE = 4  # s: the worker's idle poll at its longest before the first job


def _worker_round(count: int, probe: str | None = None) -> tuple[list[float], list[dict]]:
    """One round of ``run_jobs``: the latencies (ms), and with ``probe`` (a file for
    benchmarks/probed.py's marks) each job's stages."""
    reset_tables()
    returned: dict[int, float] = {}
    env = {"PQJOBS_PROBE_FILE": probe} if probe else None
    launcher = "benchmarks.probed" if probe else "django"
    with worker_process("--concurrency", "4", env=env, launcher=launcher):
        # (a loaded machine may take seconds to start it)
        if not wait_until(
            lambda: sql("SELECT count(*) FROM pqjobs_worker WHERE listening")[0][0], 120
        ):
            raise RuntimeError("the worker did not start listening within 120 s")
        time.sleep(IDLE)
        for _ in range(count):
            job_id = enqueue_job("tests.started_at")
            returned[job_id] = time.time()
            time.sleep(SPACING)
        time.sleep(1)
    rows = sql(
        "SELECT id, extract(epoch FROM created_at), extract(epoch FROM locked_at), "
        "result::text::float8 FROM pqjobs_job_hot WHERE status = 'done'"
    )
    if len(rows) < count:
        raise RuntimeError(f"only {len(rows)} of {count} jobs started")
    values = [(float(r[3]) - float(r[1])) * 1000 for r in rows]
    if not probe:
        return values, []
    with open(probe) as source:
        marks = json.load(source)
    heard = sorted(marks["heard"])
    claims = {i: c[:3] for c in marks["claims"] for i in c[3]}
    stages = []
    for job_id, created, locked, started in rows:
        created, started = float(created), float(started)
        first = next((h for h in heard if h >= created - 0.0005), None)
        if job_id not in claims or first is None or first > started:
            continue
        sent, read, dispatched = claims[job_id]
        stages.append(
            {
                "enqueue returned": returned[job_id] - created,
                "NOTIFY heard": first - created,
                "claim sent": sent - created,
                "claim's transaction began (locked_at)": float(locked) - created,
                "claim's rows read": read - created,
                "jobs on the executors' queue": dispatched - created,
                "handler started": started - created,
            }
        )
    return values, stages


def _floor_round(count: int) -> tuple[list[float], list[dict]]:
    """One round of the raw floor: latencies (ms) and its stages."""
    with raw_connection() as conn:
        conn.execute(CREATE)
        conn.execute(f"TRUNCATE {TABLE}")
    command = [sys.executable, "-m", "benchmarks.notify_floor"]
    process = subprocess.Popen(command, cwd=ROOT, env=dict(os.environ))
    returned: list[float] = []
    try:
        listening = f"SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN {CHANNEL}'"
        if not wait_until(lambda: sql(listening)[0][0], 120):
            raise RuntimeError("the floor did not start listening within 120 s")
        time.sleep(IDLE)
        with raw_connection() as conn:
            for _ in range(count):
                conn.execute(ENQUEUE)
                returned.append(time.time())
                time.sleep(SPACING)
        time.sleep(1)
    finally:
        process.terminate()
        process.wait(15)
    rows = sql(
        f"SELECT extract(epoch FROM created_at), extract(epoch FROM locked_at), heard, result "
        f"FROM {TABLE} WHERE status = 'done' ORDER BY id"
    )
    if len(rows) < count:
        raise RuntimeError(f"the floor started only {len(rows)} of {count} jobs")
    values = [(float(r[3]) - float(r[0])) * 1000 for r in rows]
    stages = [
        {
            "enqueue returned": back - float(c),
            "NOTIFY heard": float(h) - float(c),
            "claim's transaction began (locked_at)": float(lk) - float(c),
            "handler started": float(s) - float(c),
        }
        for (c, lk, h, s), back in zip(rows, returned, strict=True)
    ]
    return values, stages


# What the worker's path sends: pqjobs_enqueue() as enqueue_job() calls it, for a job of no
# key, deadline or version, and the worker's claim of up to 4 (its concurrency)
WORKER_ENQUEUE = (
    "SELECT pqjobs_enqueue(jsonb_populate_record(NULL::pqjobs_job_spec, "
    '\'{"payload": {}, "job_type": "tests.started_at", "queue": "default", "priority": 0, '
    '"max_attempts": 1, "notify_channel": "pqjobs"}\'))'
)
WORKER_CLAIM = "SELECT * FROM pqjobs_claim('latency-cpu', 4, NULL, NULL, NULL)"
CPU_JOBS = 1000


def _server_cpu(rounds: int) -> dict[str, list[float]]:
    """The server's CPU per enqueue and per claim (µs), the worker's statements against the
    floor's, one job at a time, ``rounds`` alternating rounds of ``CPU_JOBS``: read from the
    two server processes' CPU counters, so neither waiting for a core nor the WAL flush
    (commits here do not wait for it) is counted. A listening worker is recorded, so the
    enqueue notifies as it does beside an idle worker."""
    found: dict[str, list[float]] = {}
    with raw_connection() as enqueuer, raw_connection() as claimer:
        for conn in (enqueuer, claimer):
            conn.execute("SET synchronous_commit = off")
        enqueuer.execute(CREATE)
        pids = [c.execute("SELECT pg_backend_pid()").fetchone()[0] for c in (enqueuer, claimer)]
        for _ in range(rounds):
            for name, enqueue, claim, reset in (
                ("worker", WORKER_ENQUEUE, WORKER_CLAIM, reset_tables),
                ("floor", ENQUEUE, CLAIM, lambda: sql(f"TRUNCATE {TABLE}")),
            ):
                reset()
                sql(
                    "INSERT INTO pqjobs_worker (worker_id, hostname, concurrency, listening) "
                    "VALUES ('latency-cpu', 'here', 1, true) ON CONFLICT DO NOTHING"
                )
                before = [backend_cpu_seconds(pid) for pid in pids]
                for _ in range(CPU_JOBS):
                    enqueuer.execute(enqueue)
                    claimer.execute(claim).fetchall()
                after = [backend_cpu_seconds(pid) for pid in pids]
                for stage, start, end in zip(("enqueue", "claim"), before, after, strict=True):
                    found.setdefault(f"{name} {stage}", []).append((end - start) / CPU_JOBS * 1e6)
    sql("DELETE FROM pqjobs_worker WHERE worker_id = 'latency-cpu'")
    return found


def _median_stages(stages: list[dict]) -> dict[str, float]:
    """Each mark's median offset from created_at, in µs."""
    if not stages:
        return {}
    return {key: statistics.median(s[key] for s in stages) * 1e6 for key in stages[0]}


def run(quick: bool) -> list[Result]:
    count = 100 if quick else 200
    rounds = 2 if quick else 4
    load_before = os.getloadavg()
    worker: list[tuple[float, float]] = []
    floor: list[tuple[float, float]] = []
    probed: list[dict] = []
    floor_stages: list[dict] = []
    with tempfile.TemporaryDirectory() as scratch:
        for n in range(rounds):
            # taking turns, each round in another order
            order = ["worker", "floor", "probed"]
            order = order[n % 3 :] + order[: n % 3]
            for kind in order:
                if kind == "worker":
                    values, _ = _worker_round(count)
                    worker.append((percentile(values, 50), percentile(values, 99)))
                elif kind == "floor":
                    values, stages = _floor_round(count)
                    floor.append((percentile(values, 50), percentile(values, 99)))
                    floor_stages += stages
                else:
                    _, stages = _worker_round(count, os.path.join(scratch, f"probe{n}.json"))
                    probed += stages
    p50 = statistics.median(w[0] for w in worker)
    p99 = statistics.median(w[1] for w in worker)
    f50 = statistics.median(f[0] for f in floor)
    f99 = statistics.median(f[1] for f in floor)
    rounds_text = ", ".join(f"{w[0]:.2f}/{f[0]:.2f}" for w, f in zip(worker, floor, strict=True))
    cpu = {key: statistics.median(values) for key, values in _server_cpu(rounds + 1).items()}
    mine, theirs = _median_stages(probed), _median_stages(floor_stages)
    breakdown = "; ".join(
        f"{key} {value:.0f} µs" + (f" (floor {theirs[key]:.0f})" if key in theirs else "")
        for key, value in mine.items()
    )
    load = (
        f"load average (1 min) {load_before[0]:.1f} at the start, "
        f"{os.getloadavg()[0]:.1f} at the end"
    )
    cpu_text = ", ".join(f"{key} {value:.0f}" for key, value in cpu.items())
    extra = {
        "worker": worker,
        "floor": floor,
        "stages": mine,
        "floor_stages": theirs,
        "server_cpu_us": cpu,
    }
    return [
        Result(
            "latency: enqueue -> handler start p50",
            p50,
            "ms",
            "<= 1.2x floor",
            p50 <= 1.2 * f50,
            f"{load}; raw LISTEN/NOTIFY floor p50 {f50:.2f} ms: {p50 / f50:.2f}x (rounds, "
            f"worker/floor: {rounds_text}); median marks after the INSERT: {breakdown}; "
            f"server CPU per statement (µs, median of {rounds + 1} rounds): {cpu_text}",
            extra,
        ),
        Result(
            "latency: enqueue -> handler start p99",
            p99,
            "ms",
            "<= 1.5x floor",
            p99 <= 1.5 * f99,
            f"raw floor p99 {f99:.2f} ms: {p99 / f99:.2f}x",
        ),
    ]
