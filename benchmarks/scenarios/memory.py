"""Memory: worker RSS after N and after 10 N jobs (no growth means no leak)."""

from __future__ import annotations

from django_pqjobs import enqueue_many

from ..harness import Result, reset_tables, rss_kib, sql, wait_until, worker_process


def run(quick: bool) -> list[Result]:
    first, second = (5_000, 50_000) if quick else (10_000, 100_000)
    reset_tables()

    def done() -> int:
        return int(sql("SELECT count(*) FROM pqjobs_job_hot WHERE status = 'done'")[0][0])

    with worker_process("--concurrency", "4") as process:
        enqueue_many("tests.noop", [{}] * first)
        wait_until(lambda: done() >= first, timeout=300, interval=0.2)
        rss_first = rss_kib(process.pid)
        for offset in range(first, second, 10_000):
            enqueue_many("tests.noop", [{}] * min(10_000, second - offset))
            wait_until(lambda o=offset: done() >= o, timeout=300, interval=0.2)
        wait_until(lambda: done() >= second, timeout=300, interval=0.2)
        rss_second = rss_kib(process.pid)
    growth = (rss_second - rss_first) / rss_first
    return [
        Result(
            f"memory: RSS after {second:,} vs {first:,} jobs",
            growth * 100,
            "% growth",
            "<= 10",
            growth <= 0.10,
            f"{rss_first / 1024:.0f} MiB -> {rss_second / 1024:.0f} MiB",
        )
    ]
