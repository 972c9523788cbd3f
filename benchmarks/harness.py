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


def setup_django(settings: str = "benchmarks.settings") -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", settings)
    import django
    from django.core.management import call_command

    django.setup()
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


def reset_tables() -> None:
    sql("TRUNCATE pqjobs_attempt, pqjobs_job, pqjobs_worker RESTART IDENTITY CASCADE")
    sql("VACUUM ANALYZE pqjobs_job")


@dataclass
class Result:
    scenario: str
    figure: float
    unit: str
    target: str
    passed: bool | None
    notes: str = ""
    extra: dict = field(default_factory=dict)


@contextmanager
def worker_process(*args: str, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """A ``run_jobs`` subprocess on the same database; always stopped on exit."""
    command = [sys.executable, "-m", "django", "run_jobs", "-v", "0", *args]
    environment = {**os.environ, **(env or {})}
    process = subprocess.Popen(command, cwd=ROOT, env=environment)
    try:
        yield process
    finally:
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


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[index]
