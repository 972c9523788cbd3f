"""Enqueue: one ``enqueue_job`` per transaction from one thread, and the bulk form.

A single-row commit waits for the WAL flush, and on a small shared machine that cost
drifts by 10-20 % from one minute to the next. So the single-job figure is measured in
rounds that alternate with a reference loop (the same kind of row inserted by a bare
psycopg connection, one INSERT per transaction, no Django, no NOTIFY): both see the same
drift, the median of the rounds is the figure, and the notes give every round's range and
the ratio to the reference.
"""

from __future__ import annotations

import statistics
import time

from django_pqjobs import enqueue_job, enqueue_many

from ..harness import Result, raw_connection, reset_tables

REFERENCE_INSERT = (
    "INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, "
    "max_attempts, run_after, last_error, error_type, created_at, updated_at) "
    "VALUES ('tests.noop', 'default', %s::jsonb, 'ready', 0, 0, 5, now(), '', '', now(), now())"
)


def _rate(count: int, insert_one) -> float:
    started = time.perf_counter()
    for n in range(count):
        insert_one(n)
    return count / (time.perf_counter() - started)


def single_rounds(rounds: int, per_round: int) -> tuple[list[float], list[float]]:
    """Alternate rounds of ``enqueue_job`` and of the bare reference INSERT."""
    ours: list[float] = []
    reference: list[float] = []
    with raw_connection() as raw:

        def raw_insert(n: int) -> None:
            raw.execute(REFERENCE_INSERT, [f'{{"n":{n}}}'])

        for _ in range(rounds):
            reference.append(_rate(per_round, raw_insert))
            ours.append(_rate(per_round, lambda n: enqueue_job("tests.noop", {"n": n})))
    return ours, reference


def run(quick: bool) -> list[Result]:
    reset_tables()
    rounds, per_round = (5, 400) if quick else (9, 1_000)
    ours, reference = single_rounds(rounds, per_round)
    single_rate = statistics.median(ours)
    reference_rate = statistics.median(reference)
    reset_tables()
    bulk = 50_000 if quick else 100_000
    started = time.perf_counter()
    for offset in range(0, bulk, 10_000):
        enqueue_many("tests.noop", [{"n": n} for n in range(offset, offset + 10_000)])
    bulk_rate = bulk / (time.perf_counter() - started)
    reset_tables()
    return [
        Result(
            "reference: bare INSERT per transaction (psycopg)",
            reference_rate,
            "jobs/s",
            "-",
            None,
            notes=f"median of {rounds} rounds of {per_round}; "
            f"rounds {min(reference):.0f}-{max(reference):.0f}",
            extra={"rounds": reference},
        ),
        Result(
            "enqueue_job, one per transaction",
            single_rate,
            "jobs/s",
            ">= 2000",
            single_rate >= 2000,
            notes=f"median of {rounds} rounds of {per_round}, alternating with the reference; "
            f"rounds {min(ours):.0f}-{max(ours):.0f}; "
            f"{single_rate / reference_rate:.0%} of the bare INSERT",
            extra={"rounds": ours},
        ),
        Result(
            "enqueue_many, batches of 10,000", bulk_rate, "jobs/s", ">= 50000", bulk_rate >= 50_000
        ),
    ]
