"""``python -m benchmarks.claim_parts``: what the parts of a one-job claim cost (issue 42).

Two figures that decide where a fix of the claim's latency can come from:

- the worker's side after the statement: ``worker.claiming.claim_jobs`` with the claim's
  result already in hand (the Jobs built from its rows), in µs of wall time per claim of
  one job; it takes no lock and waits for nothing, so it reads on a busy machine too;
- the server CPU of one claim of one job (``/proc`` counters of the claiming server
  process), ``pqjobs_claim()`` against a session copy of it without the fair line's scan
  and the pause query (the "plain claim" of the plan in docs/benchmarks.md), taking turns,
  the tables emptied before each block, with ``SELECT 1`` as the floor of a statement;
  and against ``pqjobs_claim()`` as it was before migration 0039 (its ``.down.sql``, as a
  session copy): each of its two paths with its own copy of the columns.

Jobs are enqueued with ``enqueue_job`` between the claims (not counted).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from benchmarks.harness import backend_cpu_seconds, raw_connection, reset_tables, setup_django

JOB_TYPE = "tests.noop"


def _plain_copy(function: str) -> str:
    """``pqjobs_claim()``'s text as a ``pg_temp`` function without the fair line and the
    pause query (jobs of a fair key or a paused queue would be claimed wrongly: a copy to
    measure, never to use)."""
    plain = function.replace("public.pqjobs_claim(", "pg_temp.claim_plain(", 1)
    start, end = plain.index("    WITH fair AS ("), plain.index("), by_age AS (")
    plain = plain[:start] + "    WITH by_age AS (" + plain[end + len("), by_age AS (") :]
    plain = plain.replace(
        "        UNION ALL\n        SELECT ctid, id, priority, place, rank, concurrency_key, "
        "rate_key FROM fair_placed\n",
        "",
    )
    start = plain.index("IF flow OR (EXISTS")
    return plain[:start] + "IF flow " + plain[plain.index("THEN", start) :]


def build_cost(rounds: int = 5, claims: int = 20_000) -> list[float]:
    """µs per ``claim_jobs`` of one job once the statement has returned."""
    from django_pqjobs import transitions
    from django_pqjobs.enqueue import enqueue_job
    from django_pqjobs.worker import claiming

    reset_tables()
    enqueue_job(JOB_TYPE, {"i": 0})
    claimed = transitions.claim("default", "bench", None, 1)
    real = transitions.claim
    transitions.claim = lambda *args, **kwargs: claimed  # type: ignore[assignment]
    try:
        figures = []
        for _ in range(rounds):
            started = time.perf_counter()
            for _ in range(claims):
                claiming.claim_jobs("default", "bench", None, 1)
            figures.append((time.perf_counter() - started) / claims * 1e6)
        return figures
    finally:
        transitions.claim = real  # type: ignore[assignment]


def server_cpu(rounds: int = 5, claims: int = 300) -> dict[str, list[float]]:
    """µs of server CPU per claim of one job, per variant, taking turns."""
    from django_pqjobs.enqueue import enqueue_job

    root = Path(__file__).parent.parent / "django_pqjobs/sql"
    head = 'CREATE OR REPLACE FUNCTION :"schema".pqjobs_claim('

    def function(name: str) -> str:
        text = (root / name).read_text()
        start = text.index(head)
        return text[start : text.index("$$;", start) + 3].replace(':"schema".', "public.")

    claimer = raw_connection()
    claimer.execute(_plain_copy(function("schema/claim.sql")))
    before = function("migrations/0039_claimed_row_once.down.sql")
    claimer.execute(before.replace("public.pqjobs_claim(", "pg_temp.claim_before_0039(", 1))
    (pid,) = claimer.execute("SELECT pg_backend_pid()").fetchone()  # type: ignore[misc]
    variants = {
        "pqjobs_claim()": "SELECT * FROM public.pqjobs_claim('w', 1, NULL, NULL, NULL)",
        "without the fair line and the pause query": (
            "SELECT * FROM pg_temp.claim_plain('w', 1, NULL, NULL, NULL)"
        ),
        "before migration 0039": (
            "SELECT * FROM pg_temp.claim_before_0039('w', 1, NULL, NULL, NULL)"
        ),
        "SELECT 1": "SELECT 1",
    }
    figures: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds):
        for name, statement in variants.items():
            reset_tables()
            spent = 0.0
            for i in range(claims):
                enqueue_job(JOB_TYPE, {"i": i})
                before = backend_cpu_seconds(pid)
                rows = claimer.execute(statement).fetchall()
                spent += backend_cpu_seconds(pid) - before
                if name != "SELECT 1" and not (rows and rows[0][0] is not None):
                    raise RuntimeError(f"{name} claimed nothing")
            figures[name].append(spent / claims * 1e6)
    claimer.close()
    return figures


def main() -> None:
    setup_django()
    with open("/proc/loadavg") as f:
        print("load average at the start:", f.read().split()[:3])
    build = build_cost()
    print(
        f"claim_jobs after the statement: {statistics.median(build):.1f} µs per one-job claim "
        f"(rounds {[round(x, 1) for x in build]})"
    )
    for name, values in server_cpu(int(sys.argv[1]) if len(sys.argv) > 1 else 5).items():
        print(
            f"{name:45s} {statistics.median(values):6.0f} µs server CPU per claim "
            f"(rounds {[round(x) for x in values]})"
        )
    with open("/proc/loadavg") as f:
        print("load average at the end:", f.read().split()[:3])


if __name__ == "__main__":
    main()
