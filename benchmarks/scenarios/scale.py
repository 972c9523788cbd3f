"""Scale: the drain again with 1,000,000 finished jobs and 100,000 future jobs in the table."""

from __future__ import annotations

from django_pqjobs import enqueue_many

from ..harness import Result, reset_tables, sql
from .drain import drain_rate


def populate(finished: int, future: int) -> None:
    sql(
        "INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, "
        "max_attempts, run_after, last_error, error_type, created_at, updated_at, finished_at, "
        "duration_ms) SELECT 'old', 'default', '{}'::jsonb, 'done', 0, 1, 5, now(), '', '', "
        "now(), now(), now() - make_interval(secs => g), 1 FROM generate_series(1, %s) g",
        [finished],
    )
    sql(
        "INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, "
        "max_attempts, run_after, last_error, error_type, created_at, updated_at) "
        "SELECT 'later', 'default', '{}'::jsonb, 'ready', 0, 0, 5, "
        "now() + interval '1 hour', '', '', now(), now() FROM generate_series(1, %s)",
        [future],
    )
    sql("VACUUM ANALYZE pqjobs_job")


def run(quick: bool, empty_rate: float | None = None) -> list[Result]:
    jobs = 10_000 if quick else 20_000
    finished = 200_000 if quick else 1_000_000
    future = 20_000 if quick else 100_000
    reset_tables()
    populate(finished, future)
    enqueue_many("tests.noop", [{}] * jobs)
    rate, checks = drain_rate(jobs)
    ratio = rate / empty_rate if empty_rate else None
    return [
        Result(
            f"scale: drain with {finished:,} finished + {future:,} future jobs",
            rate,
            "jobs/s",
            ">= 90% of drain",
            None if ratio is None else ratio >= 0.9,
            "" if ratio is None else f"{ratio:.0%} of the empty-table rate",
            checks,
        )
    ]
