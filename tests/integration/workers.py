"""Starting real ``run_jobs`` processes from tests, always stopped, every wait bounded."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from django.db import connection

ROOT = Path(__file__).resolve().parents[2]


class WorkerProcess:
    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        # closed in stop(), which run_jobs() always calls
        self.log = tempfile.NamedTemporaryFile("w+", prefix="run_jobs-", suffix=".log")  # noqa: SIM115
        environment = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "PQJOBS_TEST_DATABASE": connection.settings_dict["NAME"],
            **env,
        }
        self.process = subprocess.Popen(
            [sys.executable, "-m", "django", "run_jobs", *args],
            cwd=ROOT,
            env=environment,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def wait(self, timeout: float) -> int:
        return self.process.wait(timeout)

    def output(self) -> str:
        self.log.flush()
        return Path(self.log.name).read_text()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


@contextmanager
def run_jobs(*args: str, **env: str) -> Iterator[WorkerProcess]:
    """``with run_jobs("--concurrency", "4", WORKER_STALE_TIMEOUT="2") as worker: ...``"""
    worker = WorkerProcess(list(args), env)
    try:
        yield worker
    finally:
        worker.stop()
