"""Metrics scrape: the Prometheus view's time on a table of 1,000,000 jobs.

Three shapes: a healthy queue (1,000,000 done jobs, 1,000 ready, 100 running, 1,000 failed),
dead letters (1,000,000 failed jobs, against the empty table in the same run) and a backlog
(1,000,000 ready jobs). A scrape reads only the waiting and running rows (through their
partial indexes) and at most the newest 10,001 failed ones, so the first two cost what the
small active set costs, and the third is the worst case: every waiting row is counted.

Scrapes go through the view as Prometheus sends them: with the bearer token.
"""

from __future__ import annotations

import statistics
import time

from ..harness import Result, reset_tables, sql

BOUND_MS = 250  # healthy queue, whatever the size of the finished history
FAILED_BOUND_MS = 25  # a million dead letters
BACKLOG_BOUND_MS = 2500  # a million waiting jobs (the statement timeout is 5 s)


def fill(status: str, count: int, job_types: int = 20, queues: int = 4) -> None:
    sql(
        "INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, "
        "max_attempts, run_after, last_error, error_type, created_at, updated_at, finished_at, "
        "duration_ms, locked_by) SELECT 'type' || (g %% %s), 'queue' || (g %% %s), '{}'::jsonb, "
        "%s, 0, 1, 5, now() - make_interval(secs => g %% 600), '', '', now(), now(), "
        "CASE WHEN %s IN ('done', 'failed') THEN now() END, 1, "
        "CASE WHEN %s = 'running' THEN 'w' END FROM generate_series(1, %s) g",
        [job_types, queues, status, status, status, count],
    )


TOKEN = "benchmark-token-" + "0" * 32


def scrape_ms(rounds: int = 7) -> tuple[float, float]:
    from django.test import Client

    client = Client()
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200
    return statistics.median(times), max(times)


def dead_letters(size: int, rounds: int = 3) -> list[Result]:
    """The scrape beside ``size`` failed jobs against the empty table, alternating: each
    round empties the table, scrapes, fills it, scrapes. The ratio is the figure to watch;
    this machine's load moves the milliseconds."""
    empty, full = [], []
    for _ in range(rounds):
        reset_tables()
        empty.append(scrape_ms()[0])
        fill("failed", size)
        sql("VACUUM ANALYZE pqjobs_job")
        full.append(scrape_ms()[0])
    ratios = [f / e for e, f in zip(empty, full, strict=True)]
    median = statistics.median(full)
    return [
        Result(
            "metrics: scrape, empty table",
            statistics.median(empty),
            "ms",
            "-",
            None,
            f"median of {rounds} rounds' medians of 7",
        ),
        Result(
            f"metrics: scrape, {size:,} failed jobs",
            median,
            "ms",
            f"<= {FAILED_BOUND_MS}",
            median <= FAILED_BOUND_MS,
            f"median of {rounds} rounds' medians of 7; "
            f"{statistics.median(ratios):.1f}x the empty table "
            f"(rounds {', '.join(f'{r:.1f}x' for r in ratios)})",
        ),
    ]


def run(quick: bool) -> list[Result]:
    from django.conf import settings
    from django.test.utils import override_settings

    size = 200_000 if quick else 1_000_000
    results = []
    with override_settings(
        ROOT_URLCONF="tests.urls",
        ALLOWED_HOSTS=["*"],
        PQJOBS={**settings.PQJOBS, "METRICS_TOKEN": TOKEN},
    ):
        results += dead_letters(size)
        reset_tables()
        fill("done", size)
        fill("ready", 1_000)
        fill("running", 100)
        fill("failed", 1_000)
        sql("VACUUM ANALYZE pqjobs_job")
        median, worst = scrape_ms()
        results.append(
            Result(
                f"metrics: scrape, {size:,} done + 2,100 active/failed jobs",
                median,
                "ms",
                f"<= {BOUND_MS}",
                worst <= BOUND_MS,
                f"median of 7, worst {worst:.0f} ms",
            )
        )
        reset_tables()
        fill("ready", size)
        sql("VACUUM ANALYZE pqjobs_job")
        median, worst = scrape_ms()
        results.append(
            Result(
                f"metrics: scrape, {size:,} ready jobs (a backlog)",
                median,
                "ms",
                f"<= {BACKLOG_BOUND_MS}",
                worst <= BACKLOG_BOUND_MS,
                f"median of 7, worst {worst:.0f} ms",
            )
        )
        reset_tables()
    return results
