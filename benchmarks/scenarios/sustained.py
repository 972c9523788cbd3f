"""Sustained: a steady enqueue rate for minutes while one worker keeps up, with pruning on."""

from __future__ import annotations

import time

from django_pqjobs import enqueue_many

from ..harness import Result, percentile, reset_tables, sql, worker_process

SIZES = (
    "SELECT pg_total_relation_size('pqjobs_job'), "
    "(SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'pqjobs_job')"
)


def run(quick: bool) -> list[Result]:
    seconds, rate, step = (30, 2_000, 10) if quick else (300, 2_000, 60)
    reset_tables()
    size_start, dead_start = sql(SIZES)[0]
    windows: list[tuple[float, float]] = []
    sizes: list[int] = []
    with worker_process(
        "--concurrency", "4", env={"DJANGO_SETTINGS_MODULE": "benchmarks.settings"}
    ):
        started = time.monotonic()
        sent = 0
        window_start = started
        while time.monotonic() - started < seconds:
            due = int((time.monotonic() - started) * rate)
            if due > sent:
                enqueue_many("tests.noop", [{}] * (due - sent))
                sent = due
            time.sleep(0.01)
            if time.monotonic() - window_start >= step:
                rows = sql(
                    "SELECT count(*), coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY "
                    "extract(epoch FROM locked_at - created_at) * 1000), 0) FROM pqjobs_job_hot "
                    "WHERE finished_at > now() - make_interval(secs => %s)",
                    [step],
                )
                windows.append((rows[0][0] / step, float(rows[0][1])))
                sizes.append(sql(SIZES)[0][0] // 2**20)
                window_start = time.monotonic()
        time.sleep(2)
    size_end, dead_end = sql(SIZES)[0]
    throughputs = [w[0] for w in windows] or [0.0]
    steady = min(throughputs) >= 0.9 * rate
    return [
        Result(
            f"sustained: {rate}/s for {seconds} s, pruning on",
            percentile(throughputs, 50),
            "jobs/s",
            f"~{rate} steady",
            steady,
            f"per {step}s window (jobs/s, p99 ms): {[(round(a), round(b, 1)) for a, b in windows]};"
            f" table {size_start // 1024} -> {size_end // 1024} KiB (MiB per window: {sizes}),"
            f" dead tuples {dead_start} -> {dead_end}",
        )
    ]
