"""Enqueue: one ``enqueue_job`` per transaction from one thread, and the bulk form.

A single-row commit waits for the WAL flush, and on a small shared machine that cost
drifts by 10-20 % from one minute to the next. So the single-job figure is measured in
rounds that alternate with a reference loop (the same kind of row inserted by a bare
psycopg connection, one INSERT per transaction, no Django, no NOTIFY): both see the same
drift, the median of the rounds is the figure, and the notes give every round's range and
the ratio to the reference.
"""

from __future__ import annotations

import os
import statistics
import time

from django_pqjobs import enqueue_job, enqueue_many, flow

from ..harness import Result, backend_cpu_seconds, raw_connection, reset_tables, sql

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


# --- against their floors, on a table as a running project has it (issue 42, item 4) --------

FLOOR_ROUNDS = 7
READY = 1_000
BENCH_TYPES = ("tests.noop", "tests.fair_noop")


def load_history(finished: int) -> None:
    """A job table as a project that has run a while has it: ``finished`` done jobs moved to
    their history partition (beside the empty ones a month of history makes), READY ready
    jobs of another type in the hot table, all analysed."""
    from . import history

    history.run_setup(finished)
    sql(
        "INSERT INTO pqjobs_job (job_type, queue, payload, status, attempts, max_attempts) "
        "SELECT 'old', 'default', '{}', 'ready', 0, 1 FROM generate_series(1, %s)",
        [READY],
    )
    sql("VACUUM ANALYZE pqjobs_job_hot")
    sql("ANALYZE pqjobs_job")


def _clear() -> None:
    """The jobs a case made gone, the table vacuumed (its statistics those of the load)."""
    sql("DELETE FROM pqjobs_job_hot WHERE job_type IN ('tests.noop', 'tests.fair_noop')")
    sql("DELETE FROM pqjobs_pause")
    sql("VACUUM pqjobs_job_hot")


def _timed(work, pid: int) -> tuple[float, float]:
    """Seconds ``work()`` takes on the wall, and the CPU seconds it costs: this process's
    and server process ``pid``'s (the waits for a core or the disk left out, so the figure
    stays readable on a busy machine)."""
    cpu = backend_cpu_seconds(pid) + time.process_time()
    started = time.perf_counter()
    work()
    seconds = time.perf_counter() - started
    return seconds, backend_cpu_seconds(pid) + time.process_time() - cpu


def _bulk(count: int, case: str) -> tuple[float, float]:
    """``enqueue_many`` of ``count`` no-op jobs as ``case`` says: (seconds, CPU seconds)."""
    if case.endswith("paused elsewhere"):
        flow.pause_queue("elsewhere")
    job_type = "tests.fair_noop" if case == "fair, 100 keys" else "tests.noop"
    payloads = [{"tenant": n % 100} for n in range(count)]
    fair = "tenant" if case == "fair, one key" else None
    ((pid,),) = sql("SELECT pg_backend_pid()")
    measured = _timed(lambda: enqueue_many(job_type, payloads, fair_key=fair), pid)
    _clear()
    return measured


def _single(count: int, case: str, raw) -> tuple[float, float]:
    """``count`` single enqueues, one per transaction, as ``case`` says: (seconds, CPU
    seconds)."""
    if case.endswith("paused elsewhere"):
        flow.pause_queue("elsewhere")
    if case == "bare INSERT":
        ((pid,),) = raw.execute("SELECT pg_backend_pid()").fetchall()

        def work() -> None:
            for n in range(count):
                raw.execute(REFERENCE_INSERT, [f'{{"n":{n}}}'])
    else:
        ((pid,),) = sql("SELECT pg_backend_pid()")

        def work() -> None:
            for n in range(count):
                enqueue_job("tests.noop", {"n": n})

    measured = _timed(work, pid)
    _clear()
    return measured


def _load() -> str:
    return "/".join(f"{n:.1f}" for n in os.getloadavg())


def run_floors(quick: bool, finished: int = 200_000) -> list[Result]:
    """``enqueue_many`` of fair-keyed jobs against plain, ``enqueue_job`` against a bare
    INSERT, each beside a pause of another queue against none: the cases take turns in every
    round (the order rotated), on a table with ``finished`` jobs in history partitions."""
    bulk, single = (5_000, 300) if quick else (10_000, 1_000)
    rounds = 3 if quick else FLOOR_ROUNDS
    load_history(finished)
    bulk_cases = ["plain", "fair, one key", "fair, 100 keys", "plain, paused elsewhere"]
    single_cases = ["bare INSERT", "enqueue_job", "enqueue_job, paused elsewhere"]
    wall: dict[str, list[float]] = {case: [] for case in bulk_cases + single_cases}
    cpu: dict[str, list[float]] = {case: [] for case in bulk_cases + single_cases}
    with raw_connection() as raw:
        for r in range(rounds):
            turns = [(case, lambda c: _bulk(bulk, c)) for case in bulk_cases[r % 4 :]]
            turns += [(case, lambda c: _bulk(bulk, c)) for case in bulk_cases[: r % 4]]
            turns += [(c, lambda c: _single(single, c, raw)) for c in single_cases[r % 3 :]]
            turns += [(c, lambda c: _single(single, c, raw)) for c in single_cases[: r % 3]]
            for case, measure in turns:
                seconds, used = measure(case)
                wall[case].append(seconds)
                cpu[case].append(used)
    reset_tables()

    def ratios(case: str, floor: str) -> tuple[float, float]:
        """The medians of the rounds' ratios: of the rates on the wall, of the CPU costs."""
        return (
            statistics.median(f / c for f, c in zip(wall[floor], wall[case], strict=True)),
            statistics.median(f / c for f, c in zip(cpu[floor], cpu[case], strict=True)),
        )

    def per(case: str, count: int) -> str:
        return (
            f"{count / statistics.median(wall[case]):,.0f}/s, "
            f"{statistics.median(cpu[case]) / count * 1e6:,.0f} µs CPU each"
        )

    where = f"{finished:,} finished in history, {READY:,} ready, analysed; load {_load()}"
    results = []
    for case, floor, target, count, label in (
        ("fair, one key", "plain", 0.70, bulk, f"enqueue_many {bulk:,}: fair (one key) / plain"),
        ("fair, 100 keys", "plain", 0.70, bulk, f"enqueue_many {bulk:,}: fair (100 keys) / plain"),
        ("plain, paused elsewhere", "plain", 0.90, bulk, f"enqueue_many {bulk:,}: a pause"),
        ("enqueue_job", "bare INSERT", 0.85, single, "enqueue_job / a bare INSERT"),
        ("enqueue_job, paused elsewhere", "enqueue_job", 0.90, single, "enqueue_job: a pause"),
    ):
        by_wall, by_cpu = ratios(case, floor)
        results.append(
            Result(
                label,
                by_wall * 100,
                "%",
                f">= {target:.0%}",
                by_wall >= target,
                f"median of {rounds} rounds' ratios, taking turns; CPU (client + server) "
                f"{by_cpu:.0%}; {case} {per(case, count)}, {floor} {per(floor, count)}; {where}",
                extra={"wall": [wall[case], wall[floor]], "cpu": [cpu[case], cpu[floor]]},
            )
        )
    return results
