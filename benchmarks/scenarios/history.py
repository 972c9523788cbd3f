"""History: the drain beside 1,000,000 finished jobs kept in history partitions, against the
empty table in the same run, and the pruning of a day of 1,000,000 finished jobs.

A million done jobs that finished on one UTC day (three days ago) are written as workers
leave them, in the hot table, with the empty partitions of the four statuses over their
default retention beside them (what a month of history makes); the maintenance's mover moves
the million to their partition (timed). Rounds then alternate the drain with the history
partitions attached (the queue beside a million finished jobs) and detached (the empty
table), so both see the same drift of the machine. Last, ``RETENTION`` drops the day: the
prune is timed, the partition drop it is.
"""

from __future__ import annotations

import statistics
import time

from django_pqjobs import enqueue_many
from django_pqjobs.transitions import history
from django_pqjobs.worker import housekeeping

from ..harness import (
    HISTORY,
    RETENTION,
    Result,
    insert_done_jobs,
    prepare_month_of_partitions,
    reset_tables,
    sql,
)
from .drain import drain_rate

DAY = 86400.0


def partitions() -> list[tuple[str, str, str]]:
    """(parent, partition, bound) of every history partition."""
    return [
        (str(parent), str(name), str(bound))
        for parent, name, bound in sql(
            "SELECT i.inhparent::regclass, c.relname, pg_get_expr(c.relpartbound, c.oid) "
            "FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "WHERE i.inhparent IN ('pqjobs_job'::regclass, 'pqjobs_attempt'::regclass) "
            "AND c.relname NOT LIKE '%%_hot'"
        )
    ]


def detach(parts: list[tuple[str, str, str]]) -> None:
    for parent, name, _ in parts:
        sql(f"ALTER TABLE {parent} DETACH PARTITION {name}")


def attach(parts: list[tuple[str, str, str]]) -> None:
    for parent, name, bound in parts:
        sql(f"ALTER TABLE {parent} ATTACH PARTITION {name} {bound}")


def drain_once(jobs: int) -> tuple[float, bool]:
    sql("DELETE FROM pqjobs_job_hot WHERE job_type = 'tests.noop'")
    sql("VACUUM ANALYZE pqjobs_job_hot")
    enqueue_many("tests.noop", [{}] * jobs)
    rate, checks = drain_rate(jobs, env={"DJANGO_SETTINGS_MODULE": "benchmarks.settings_history"})
    ok = checks["done"] == jobs == checks["complete_rows"] and checks["exit_code"] == 0
    return rate, ok


def run_setup(finished: int) -> tuple[int, float]:
    """The empty table, the history partitions a month makes, and ``finished`` done jobs
    moved to theirs by the maintenance's mover: (jobs moved, seconds the move took)."""
    reset_tables()
    prepare_month_of_partitions()
    insert_done_jobs("old", finished)
    sql("ANALYZE pqjobs_job_hot")
    started = time.monotonic()
    moved = history.shelve("default", "done", 600, RETENTION["done"], max_batches=10_000)
    moving = time.monotonic() - started
    return moved, moving


def run(quick: bool) -> list[Result]:
    jobs = 10_000 if quick else 20_000
    finished = 200_000 if quick else 1_000_000
    rounds = 2 if quick else 3
    kept = HISTORY["finished"]
    HISTORY["finished"] = 0  # this scenario makes its own history (and prunes it)
    try:
        return _run(jobs, finished, rounds)
    finally:
        HISTORY["finished"] = kept


def _run(jobs: int, finished: int, rounds: int) -> list[Result]:
    moved, moving = run_setup(finished)
    sql("VACUUM ANALYZE pqjobs_job_hot")
    parts = partitions()

    rates: dict[str, list[float]] = {"history": [], "empty": []}
    intact = True
    for _ in range(rounds):
        rate, ok = drain_once(jobs)
        rates["history"].append(rate)
        detach(parts)
        try:
            rate, ok_empty = drain_once(jobs)
            rates["empty"].append(rate)
        finally:
            attach(parts)
        intact = intact and ok and ok_empty
    with_history = statistics.median(rates["history"])
    empty = statistics.median(rates["empty"])
    ratio = with_history / empty if empty else 0.0

    started = time.monotonic()
    dropped = housekeeping.prune("default", {"done": 2 * DAY})["done"]
    pruning = time.monotonic() - started
    left = int(sql("SELECT count(*) FROM pqjobs_job WHERE job_type = 'old'")[0][0])

    def spread(name: str) -> str:
        return f"rounds {min(rates[name]):,.0f}-{max(rates[name]):,.0f}"

    integrity = "" if intact else "; integrity check failed"
    return [
        Result(
            f"history: drain beside {finished:,} finished jobs in partitions",
            with_history,
            "jobs/s",
            ">= 95% of empty",
            ratio >= 0.95 and intact,
            f"{ratio:.0%} of the empty table's {empty:,.0f} jobs/s (medians of {rounds} "
            f"alternating rounds; {spread('history')} / {spread('empty')}); "
            f"{len(parts) // 2} partitions{integrity}",
        ),
        Result(
            f"history: prune a day of {finished:,} finished jobs",
            pruning,
            "s",
            "< 1 s",
            pruning < 1.0 and dropped == finished and left == 0,
            f"{dropped:,} jobs dropped (their partition, with its attempts' and the month's "
            "empty ones)",
        ),
        Result(
            "history: move finished jobs to their partition",
            moved / moving if moving else 0.0,
            "jobs/s",
            "-",
            None,
            f"{moved:,} jobs in {moving:.1f} s (the maintenance's mover, 5,000 a transaction)",
        ),
    ]
