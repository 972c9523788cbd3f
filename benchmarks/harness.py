"""Shared plumbing for the benchmarks: Django setup, table resets, worker processes, timing."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def setup_django(settings: str = "benchmarks.settings", migrate: bool = True) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings)
    import django
    from django.core.management import call_command

    django.setup()
    if migrate:
        call_command("migrate", verbosity=0)


def sql(statement: str, params: list | None = None) -> list[tuple]:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(statement, params or [])
        return cursor.fetchall() if cursor.description else []


def raw_connection():
    """A psycopg connection (autocommit) to the benchmark database, without Django."""
    import psycopg
    from django.db import connection

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params, autocommit=True)


# Finished jobs every scenario runs beside, kept in history partitions (``run.py
# --history``): tables as a queue in service has them, not freshly truncated ones.
HISTORY = {"finished": 0}
HISTORY_TYPE = "old"  # the job type of the history rows (scenarios count their own types)
DAY = 86400.0
# what a month of history makes at the default RETENTION (a partition a seventh of it)
RETENTION = {"done": 7 * DAY, "failed": 30 * DAY, "cancelled": 7 * DAY, "expired": 7 * DAY}


def use_history(finished: int) -> None:
    """Every later :func:`reset_tables` leaves ``finished`` done jobs in history partitions
    beside the emptied hot table (loaded once, kept between rounds and scenarios)."""
    HISTORY["finished"] = finished


def history_rows() -> int:
    """The history jobs in history partitions now (0 when there are none)."""
    return int(
        sql(
            "SELECT count(*) FROM pqjobs_job WHERE shelf <> 'hot' AND job_type = %s",
            [HISTORY_TYPE],
        )[0][0]
    )


def _drop_history() -> None:
    from django_pqjobs.worker.housekeeping import RETAINED

    for status in RETAINED:
        sql("SELECT pqjobs_history_drop(%s, 'infinity'::date)", [status])


def insert_done_jobs(job_type: str, finished: int) -> None:
    """``finished`` done jobs of ``job_type``, all of one UTC day three days ago, in the hot
    table (where workers leave them for the mover)."""
    sql(
        "INSERT INTO pqjobs_job (job_type, queue, payload, status, priority, attempts, "
        "max_attempts, run_after, last_error, error_type, created_at, updated_at, finished_at, "
        "duration_ms) SELECT %s, 'default', '{}'::jsonb, 'done', 0, 1, 5, now(), '', '', "
        "now(), now(), date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' "
        "- interval '3 days' + make_interval(secs => g * 80000.0 / %s), 1 "
        "FROM generate_series(1, %s) g",
        [job_type, finished, finished],
    )


def prepare_month_of_partitions() -> None:
    """The empty history partitions a month makes at the default retention (``RETENTION``),
    for each status, ending today."""
    from datetime import UTC, datetime, timedelta

    from django_pqjobs.transitions import history

    today = datetime.now(UTC).date()
    spans = {status: history.span_for(kept) for status, kept in RETENTION.items()}
    history.prepare(
        "default",
        sorted(
            {
                history.shelf(s, history.span_start(today - timedelta(days=n), spans[s]), spans[s])
                for s in RETENTION
                for n in range(int(RETENTION[s] / DAY) + 1)
            }
        ),
    )


def load_history(finished: int) -> float:
    """``finished`` done jobs of one UTC day three days ago, moved by the maintenance's mover
    into their history partition, with the empty partitions of the four statuses over their
    default retention beside them, the tables analysed; returns the mover's seconds."""
    from django_pqjobs.transitions import history

    prepare_month_of_partitions()
    insert_done_jobs(HISTORY_TYPE, finished)
    sql("ANALYZE pqjobs_job_hot")
    started = time.monotonic()
    history.shelve("default", "done", 600, RETENTION["done"], max_batches=1_000_000)
    moving = time.monotonic() - started
    sql("VACUUM ANALYZE pqjobs_job")
    sql("VACUUM ANALYZE pqjobs_attempt")
    return moving


def reset_tables() -> None:
    """Empty the queue's tables (the hot partitions and the rest); the history partitions
    hold ``HISTORY["finished"]`` done jobs after it (loaded only when they do not already),
    and everything is analysed."""
    # No RESTART IDENTITY: the history's ids come from the hot table's sequence too, and
    # a job must not meet the signals or steps of an earlier job of its id (the signals, not
    # emptied here once, resumed the resume-latency scenario's jobs before they parked).
    sql(
        "TRUNCATE pqjobs_job_hot, pqjobs_attempt_hot, pqjobs_worker, pqjobs_key_slot, "
        "pqjobs_rate, pqjobs_pause, pqjobs_batch, pqjobs_dependency, pqjobs_signal, "
        "pqjobs_step CASCADE"
    )
    finished = HISTORY["finished"]
    if history_rows() != finished or (
        finished and sql("SELECT count(*) FROM pqjobs_job WHERE shelf <> 'hot'")[0][0] != finished
    ):
        # a scenario left other history (or pruned ours): start it again
        _drop_history()
        if finished:
            load_history(finished)
    sql("VACUUM ANALYZE pqjobs_job_hot")
    sql("VACUUM ANALYZE pqjobs_attempt_hot")


@dataclass
class Result:
    scenario: str
    figure: float
    unit: str
    target: str
    passed: bool | None
    notes: str = ""
    extra: dict = field(default_factory=dict)


LOG_DIR = ROOT / "benchmarks" / "results"


@contextmanager
def worker_process(
    *args: str, env: dict[str, str] | None = None, launcher: str = "django"
) -> Iterator[subprocess.Popen]:
    """A ``run_jobs`` subprocess on the same database, run the way users run it (default
    verbosity: its log lines are written to ``results/worker.log``); always stopped on exit.

    ``launcher``: the module that runs the command (``benchmarks.without_tracing`` runs it
    as if ``opentelemetry`` were not installed).
    """
    command = [sys.executable, "-m", launcher, "run_jobs", *args]
    environment = {**os.environ, **(env or {})}
    if HISTORY["finished"] and "DJANGO_SETTINGS_MODULE" not in (env or {}):
        # its pruning off: the history every scenario runs beside stays
        environment["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings_history"
    LOG_DIR.mkdir(exist_ok=True)
    with open(LOG_DIR / "worker.log", "a") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=environment, stdout=log, stderr=log)
    try:
        yield process
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not exited within 15 s."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def wait_until(predicate, timeout: float, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


_TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    """``/proc/<pid>/stat`` from its third field (the state) on: index n is field n + 3."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()


def _processes() -> dict[int, tuple[int, int, int]]:
    """Every living process: pid -> (parent pid, its own CPU ticks, the CPU ticks of its
    children gone and reaped)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = _stat(int(entry.name))
        except OSError:  # gone meanwhile
            continue
        own = int(fields[11]) + int(fields[12])  # utime, stime
        found[int(entry.name)] = (int(fields[1]), own, int(fields[13]) + int(fields[14]))
    return found


def backend_cpu_seconds(pid: int) -> float:
    """CPU seconds server process ``pid`` (``pg_backend_pid()``) has used so far."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK


def server_cpu_seconds() -> float:
    """CPU seconds the PostgreSQL server on this machine has used so far: its postmaster's
    own and those of its children gone (reaped into its counts), plus each living child's.
    The whole server: benchmarks run alone on it."""
    ((backend,),) = sql("SELECT pg_backend_pid()")
    processes = _processes()
    postmaster = processes[backend][0]
    _, own, reaped = processes[postmaster]
    children = sum(ticks for parent, ticks, _ in processes.values() if parent == postmaster)
    return (own + reaped + children) / _TICK


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds used so far by process ``pid`` and every living process under it (a
    ``run_jobs --processes N`` supervisor and its worker processes)."""
    processes = _processes()
    tree, added = {pid}, True
    while added:
        below = {child for child, (parent, _, _) in processes.items() if parent in tree} - tree
        tree |= below
        added = bool(below)
    return sum(processes[member][1] for member in tree if member in processes) / _TICK


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]


def drain_seconds(job_type: str, payloads: list) -> float:
    """Enqueue one job of ``job_type`` per payload on emptied tables, drain them with
    ``run_jobs --concurrency 4 --burst``; the seconds from the first claim to the last
    finish (RuntimeError when not all finished)."""
    from django_pqjobs import enqueue_many

    reset_tables()
    enqueue_many(job_type, payloads)
    sql("VACUUM ANALYZE pqjobs_job")
    with worker_process("--concurrency", "4", "--burst") as process:
        process.wait(600)
    (seconds,) = sql(
        "SELECT extract(epoch FROM max(finished_at) - min(locked_at)) FROM pqjobs_job_hot "
        "WHERE status = 'done'"
    )[0]
    done = sql("SELECT count(*) FROM pqjobs_job_hot WHERE status = 'done'")[0][0]
    if done != len(payloads):
        raise RuntimeError(f"only {done} of {len(payloads)} {job_type} jobs finished")
    return float(seconds)


class BackendCpu:
    """CPU seconds the server spent for this database's sessions while it ran (a context
    manager; ``seconds`` after it): every session but the meter's own, sampled every 20 ms,
    since a session's counts go with it when it ends. Robust to the load of a shared
    machine where a rate is not: the work per job, not how soon the CPU was had. Sessions
    that began meanwhile count from nothing (their start is part of the work)."""

    def __init__(self, interval: float = 0.02) -> None:
        import threading

        self.interval = interval
        self.first: dict[int, float] = {}
        self.last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._ready = threading.Event()

    def _read(self, conn, initial: bool) -> None:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
        for pid in pids:
            try:
                cpu = backend_cpu_seconds(pid)
            except OSError:  # gone meanwhile
                continue
            if pid not in self.first:
                self.first[pid] = cpu if initial else 0.0
            self.last[pid] = cpu

    def _sample(self) -> None:
        with raw_connection() as conn:
            self._read(conn, initial=True)
            self._ready.set()
            while not self._stop.wait(self.interval):
                self._read(conn, initial=False)
            self._read(conn, initial=False)

    def __enter__(self) -> BackendCpu:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    @property
    def seconds(self) -> float:
        return sum(self.last[pid] - self.first[pid] for pid in self.last)
