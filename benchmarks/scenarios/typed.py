"""Typed arguments and encrypted jobs (issue 31): what a dataclass-typed job costs against
the same job with a plain dict payload (>= 90 %), and the same dict job encrypted at rest
(>= 75 %), on enqueue and on the drain; and, for reference, a dataclass-typed job encrypted
(both costs at once).

Enqueue: ``enqueue_job`` of ``tests.typed_noop`` with a ``Point`` instance (checked field
by field, stored as JSON) against ``enqueue_job`` of ``tests.noop`` with the same dict,
alternating rounds of 1,000. Drain: 20,000 of each enqueued first, then
``run_jobs --concurrency 4 --burst`` (the typed handler gets the payload rebuilt as a
``Point``), alternating, 5 rounds; jobs / (last ``finished_at`` - first ``locked_at``).
"""

from __future__ import annotations

import statistics
import time

from django_pqjobs import enqueue_job, enqueue_many
from tests.testapp.jobs import Point

from ..harness import Result, reset_tables, sql, worker_process

# The contenders: the plain job, the typed one, the plain one encrypted, the typed one
# encrypted.
KINDS = {
    "dict": "tests.noop",
    "typed": "tests.typed_noop",
    "encrypted": "tests.encrypted_dict_noop",
    "typed+encrypted": "tests.encrypted_noop",
}
# (what, target share of the dict job's rate)
TARGETS = {
    "typed": ("a dataclass no-op", 0.9),
    "encrypted": ("an encrypted no-op (dict payload)", 0.75),
    "typed+encrypted": ("an encrypted dataclass no-op", 0.9 * 0.75),
}


def _payload(kind: str, n: int) -> object:
    dict_payload = {"x": n, "y": n + 1, "label": "p"}
    return dict_payload if kind in ("dict", "encrypted") else Point(n, n + 1, "p")


def _enqueue_rate(kind: str, count: int) -> float:
    started = time.perf_counter()
    for n in range(count):
        enqueue_job(KINDS[kind], _payload(kind, n))
    return count / (time.perf_counter() - started)


def _drain_rate(kind: str, count: int) -> float:
    reset_tables()
    enqueue_many(KINDS[kind], [_payload(kind, n) for n in range(count)])
    sql("VACUUM ANALYZE pqjobs_job")
    with worker_process("--concurrency", "4", "--burst") as process:
        process.wait(600)
    (rate,) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0) "
        "FROM pqjobs_job_hot WHERE status = 'done'"
    )[0]
    return float(rate or 0)


def run(quick: bool) -> list[Result]:
    rounds, per_round, drained = (3, 300, 5_000) if quick else (7, 1_000, 20_000)
    reset_tables()
    enqueues = [{k: _enqueue_rate(k, per_round) for k in KINDS} for _ in range(rounds)]
    # an odd number of drain rounds: each varies by +-10 %, and the median is then a round's
    drains = [{k: _drain_rate(k, drained) for k in KINDS} for _ in range(rounds // 2 + 2)]
    reset_tables()
    results = []
    for kind, (label, target) in TARGETS.items():
        for what, rows, size in (
            ("enqueue_job of", enqueues, per_round),
            ("drain of", drains, drained),
        ):
            ratio = statistics.median(row[kind] / row["dict"] for row in rows)
            results.append(
                Result(
                    f"{kind}: {what} {label}" + (f" x {size:,}" if what == "drain of" else ""),
                    statistics.median(row[kind] for row in rows),
                    "jobs/s",
                    f">= {target:.0%} of dict",
                    ratio >= target,
                    f"{ratio:.0%} of the same job with a dict payload (median of {len(rows)} "
                    f"rounds, the contenders taking turns; dict "
                    f"{statistics.median(row['dict'] for row in rows):,.0f}/s)",
                )
            )
    return results
