"""Drain: no-op jobs enqueued beforehand, one ``run_jobs --concurrency 4 --burst`` process.

The rate is measured on the database clock: jobs / (last finished_at - first locked_at).
"""

from __future__ import annotations

from django_pqjobs import enqueue_many

from ..harness import Result, reset_tables, sql, worker_process

TARGET = 10_000


def drain_rate(jobs: int) -> tuple[float, dict]:
    with worker_process("--concurrency", "4", "--burst") as process:
        process.wait(600)
        code = process.returncode
    (rate, done, complete) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0), "
        "count(*) FILTER (WHERE status = 'done'), "
        "count(*) FILTER (WHERE finished_at IS NOT NULL AND duration_ms IS NOT NULL) "
        "FROM pqjobs_job WHERE job_type = 'tests.noop' AND run_after <= now()"
    )[0]
    checks = {"exit_code": code, "done": int(done), "complete_rows": int(complete), "jobs": jobs}
    return float(rate or 0), checks


def run(quick: bool) -> list[Result]:
    jobs = 10_000 if quick else 20_000
    reset_tables()
    enqueue_many("tests.noop", [{}] * jobs)
    rate, checks = drain_rate(jobs)
    ok = checks["done"] == jobs == checks["complete_rows"] and checks["exit_code"] == 0
    return [
        Result(
            f"drain: {jobs} no-op jobs, concurrency 4",
            rate,
            "jobs/s",
            f">= {TARGET}",
            ok and rate >= TARGET,
            "" if ok else f"integrity check failed: {checks}",
            checks,
        )
    ]
