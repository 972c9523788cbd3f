"""The database's own limit: a minimal SQL claim/complete loop on the same table design.

Two claims: the worker's own (``pqjobs_claim()``), and a raw ``UPDATE ... FOR UPDATE SKIP
LOCKED ... RETURNING`` on the same table (the loop issue 42 measures the drain against).
"""

from __future__ import annotations

import threading
import time

from django_pqjobs import enqueue_many

from ..harness import BackendCpu, Result, raw_connection, reset_tables

COMPLETE = (
    "UPDATE pqjobs_job SET status = 'done', finished_at = now(), duration_ms = 0 WHERE id = ANY(%s)"
)


RAW_CLAIM = (
    "UPDATE pqjobs_job SET status = 'running', attempts = attempts + 1, locked_at = now(), "
    "locked_by = %(worker)s, heartbeat_at = now(), updated_at = now() "
    "WHERE shelf = 'hot' AND id IN (SELECT id FROM pqjobs_job WHERE shelf = 'hot' "
    "AND status = 'ready' AND run_after <= now() ORDER BY priority DESC, run_after, id "
    "LIMIT %(limit)s FOR UPDATE SKIP LOCKED) RETURNING id"
)


def drain_with_sql(
    jobs: int, threads: int, batch: int, raw: bool = False, cpu: list[float] | None = None
) -> float:
    """Jobs/s of the loop; with ``cpu``, the server's CPU seconds for it are appended."""
    reset_tables()
    enqueue_many("tests.noop", [{}] * jobs)
    # what the worker calls, or the raw loop's UPDATE
    claim = RAW_CLAIM if raw else "SELECT * FROM pqjobs_claim(%(worker)s, %(limit)s)"

    def loop(n: int) -> None:
        with raw_connection() as conn:
            while True:
                rows = conn.execute(claim, {"limit": batch, "worker": f"baseline-{n}"}).fetchall()
                rows = [row for row in rows if row[0] is not None]  # (the held-count row)
                if not rows:
                    return
                conn.execute(COMPLETE, [[r[0] for r in rows]])

    workers = [threading.Thread(target=loop, args=(n,)) for n in range(threads)]
    with BackendCpu() as meter:
        started = time.perf_counter()
        for t in workers:
            t.start()
        for t in workers:
            t.join()
        elapsed = time.perf_counter() - started
    if cpu is not None:
        cpu.append(meter.seconds)
    return jobs / elapsed


def run(quick: bool) -> list[Result]:
    jobs = 10_000 if quick else 20_000
    results = []
    for batch in (10, 100):
        rate = drain_with_sql(jobs, 4, batch)
        results.append(
            Result(f"baseline: SQL loop, 4 threads, batch {batch}", rate, "jobs/s", "-", None)
        )
    rate = drain_with_sql(jobs, 4, 100, raw=True)
    results.append(
        Result("baseline: raw UPDATE loop, 4 threads, batch 100", rate, "jobs/s", "-", None)
    )
    return results
