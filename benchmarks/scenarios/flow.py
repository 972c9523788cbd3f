"""Flow control: what limits, rates and pauses cost the jobs they do not hold.

- *configured elsewhere*: the no-op drain with, in the same table, jobs of other types held
  by a concurrency limit, a used-up rate and a paused queue, against the plain drain;
  rounds alternate so that both see the same machine.
- *head of line*: 100,000 due jobs of one key limited to 1 ahead of 20,000 unrelated ones:
  the unrelated jobs' rate from the worker's start, against their rate alone. Jobs that
  could not start when enqueued are inserted ``blocked`` (sql/schema/flow.sql), out of the
  claim index, and a pause blocks its queue's ready jobs at once: no claim walks over them.
- *enqueue beside a pause*: on a table of 100,000 finished and 1,000 ready jobs, analysed
  (as autovacuum leaves a real one), ``enqueue_many`` of 50,000 jobs into a paused queue and
  into an open queue while another is paused, each against the same with nothing paused.
  Alone, at other sizes: ``run.py --only flow_enqueue --finished 100000,1000000``.
"""

from __future__ import annotations

import statistics
import time

from django_pqjobs import enqueue_many, flow

from ..harness import Result, reset_tables, sql, worker_process

ROUNDS = 5
HEAD_OF_LINE_ROUNDS = 3
ENQUEUE_ROUNDS = 7
FINISHED, READY = 100_000, 1_000


def noop_rate() -> float:
    (rate,) = sql(
        "SELECT count(*) / NULLIF(extract(epoch FROM max(finished_at) - min(locked_at)), 0) "
        "FROM pqjobs_job WHERE job_type = 'tests.noop' AND status = 'done'"
    )[0]
    return float(rate or 0)


def hold_other_work() -> None:
    """Other types' jobs that flow control holds: a key at its limit (a job of it runs on a
    worker that keeps heartbeating), a rate used up for the hour, a paused queue."""
    enqueue_many("tests.limited", [{"k": "busy"}] * 2000)
    sql(
        "UPDATE pqjobs_job SET status = 'running', locked_by = 'elsewhere', locked_at = now(), "
        "heartbeat_at = now() + interval '1 hour', attempts = 1 "
        "WHERE id = (SELECT min(id) FROM pqjobs_job WHERE job_type = 'tests.limited')"
    )
    sql("UPDATE pqjobs_key_slot SET running = 1 WHERE key = 'k:busy'")
    enqueue_many("tests.rated", [{}] * 2000)
    sql("UPDATE pqjobs_rate SET allowance = 1, period = 3600")
    enqueue_many("tests.noop", [{}] * 2000, queue="held")
    flow.pause_queue("held")


def drain(jobs: int, configured: bool) -> float:
    reset_tables()
    if configured:
        hold_other_work()
    enqueue_many("tests.noop", [{}] * jobs)
    sql("VACUUM ANALYZE pqjobs_job")
    with worker_process("--concurrency", "4", "--burst") as process:
        process.wait(600)
    return noop_rate()


def head_of_line(backlog: int, unrelated: int) -> float:
    """The unrelated jobs' rate from the worker's start (so the time it takes to get past
    the held backlog counts) to the last of them finished."""
    reset_tables()
    if backlog:
        enqueue_many("tests.limited", [{"k": "hot", "seconds": 0}] * backlog)
    enqueue_many("tests.noop", [{}] * unrelated)
    sql("VACUUM ANALYZE pqjobs_job")
    ((started,),) = sql("SELECT now()")
    with worker_process("--concurrency", "4"):
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            (done,) = sql(
                "SELECT count(*) FROM pqjobs_job WHERE job_type = 'tests.noop' AND status = 'done'"
            )[0]
            if done == unrelated:
                break
            time.sleep(0.2)
    ((seconds,),) = sql(
        "SELECT extract(epoch FROM max(finished_at) - %s) FROM pqjobs_job "
        "WHERE job_type = 'tests.noop'",
        [started],
    )
    return unrelated / float(seconds)


def load_analysed(finished: int) -> None:
    """A job table of ``finished`` finished and READY ready jobs, analysed (as autovacuum
    leaves a real one)."""
    reset_tables()
    sql(
        "INSERT INTO pqjobs_job (job_type, queue, payload, status, attempts, max_attempts, "
        "finished_at) SELECT 'tests.noop', 'default', '{}', CASE WHEN g <= %s THEN 'done' "
        "ELSE 'ready' END, 0, 1, CASE WHEN g <= %s THEN now() END "
        "FROM generate_series(1, %s) g",
        [finished, finished, finished + READY],
    )
    sql("ANALYZE pqjobs_job_hot")


def enqueue_beside_pause(jobs: int, paused: str | None) -> float:
    """Seconds ``enqueue_many`` of ``jobs`` into queue ``bulk`` takes on the loaded table,
    with queue ``paused`` paused (or nothing); then the table as it was (the new jobs and
    the pause gone, vacuumed; the statistics those of the load)."""
    if paused:
        flow.pause_queue(paused)
    payloads = [{}] * jobs
    started = time.perf_counter()
    enqueue_many("tests.noop", payloads, queue="bulk")
    seconds = time.perf_counter() - started
    sql("DELETE FROM pqjobs_job WHERE queue = 'bulk'")
    if paused:
        flow.resume_queue(paused)
    sql("VACUUM pqjobs_job_hot")
    return seconds


def run_enqueue(quick: bool, finished: int = FINISHED) -> list[Result]:
    """enqueue_many into a paused queue and beside a pause, against nothing paused, on a
    table of ``finished`` finished jobs; the three cases in turn, each round."""
    bulk = 10_000 if quick else 50_000
    load_analysed(finished)
    timed = [
        {case: enqueue_beside_pause(bulk, case) for case in (None, "elsewhere", "bulk")}
        for _ in range(ENQUEUE_ROUNDS)
    ]
    # On a busy machine the other processes only ever add time: each case's fastest round is
    # its own cost most nearly, and the ratio of the fastest rounds is the figure (the median
    # of the rounds' ratios is given beside it).
    unpaused = min(t[None] for t in timed)
    enqueues = [
        (
            case,
            label,
            unpaused / min(t[case] for t in timed),
            statistics.median(t[None] / t[case] for t in timed),
        )
        for case, label in (("bulk", "into a paused queue"), ("elsewhere", "beside a pause"))
    ]
    return [
        Result(
            f"flow: enqueue_many {bulk:,} {label}, {finished:,} finished analysed",
            bulk / min(t[case] for t in timed),
            "jobs/s",
            ">= 80% of no pause",
            ratio >= 0.8,
            f"{ratio:.0%} of the same with nothing paused (fastest of {ENQUEUE_ROUNDS} rounds "
            f"each; nothing paused {bulk / unpaused:.0f}/s; median of the rounds' ratios "
            f"{median:.0%})",
        )
        for case, label, ratio, median in enqueues
    ]


def run(quick: bool) -> list[Result]:
    jobs = 10_000 if quick else 20_000
    plain: list[float] = []
    configured: list[float] = []
    for _ in range(ROUNDS):
        plain.append(drain(jobs, configured=False))
        configured.append(drain(jobs, configured=True))
    ratio = statistics.median(c / p for c, p in zip(configured, plain, strict=True))
    backlog = 20_000 if quick else 100_000
    unrelated = 5_000 if quick else 20_000
    pairs = [
        (head_of_line(0, unrelated), head_of_line(backlog, unrelated))
        for _ in range(HEAD_OF_LINE_ROUNDS)
    ]
    held_ratio = statistics.median(b / a for a, b in pairs)
    alone = statistics.median(a for a, _ in pairs)
    behind = statistics.median(b for _, b in pairs)
    return [
        Result(
            "flow: drain, limits/rates/pauses holding other types",
            statistics.median(configured),
            "jobs/s",
            ">= 95% of plain",
            ratio >= 0.95,
            f"{ratio:.0%} of the plain drain (median of {ROUNDS} alternating pairs; plain "
            f"{statistics.median(plain):.0f}/s)",
        ),
        Result(
            f"flow: {unrelated:,} jobs behind {backlog:,} of one key limited to 1",
            behind,
            "jobs/s",
            ">= 80% of alone",
            held_ratio >= 0.8,
            f"{held_ratio:.0%} of the same jobs alone (median of {HEAD_OF_LINE_ROUNDS} "
            f"alternating pairs; alone {alone:.0f}/s)",
        ),
        *run_enqueue(quick),
    ]
