"""Shared fixtures: an in-process worker running in a thread, and bounded waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from django_pqjobs.enqueue import NOTIFY_CHANNEL
from django_pqjobs.models import Job


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail the test at ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


def job_status(job_id: int) -> str:
    return Job.objects.values_list("status", flat=True).get(pk=job_id)


def wait_status(job_id: int, *statuses: str, timeout: float = 10.0) -> Job:
    wait_for(lambda: job_status(job_id) in statuses, timeout)
    return Job.objects.get(pk=job_id)


@pytest.fixture
def listener() -> Iterator[psycopg.Connection]:
    """A connection of its own, LISTENing on the channel enqueues notify (as workers do)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield conn


@pytest.fixture
def worker_factory() -> Iterator[Callable[..., Any]]:
    """Start ``Worker(**options)`` in a thread; every started worker is stopped at teardown."""
    from django_pqjobs.worker.worker import Worker

    started: list[tuple[Worker, threading.Thread]] = []

    def start(**options: Any) -> Worker:
        options.setdefault("shutdown_timeout", 2)
        worker = Worker(**options)
        thread = worker.run_in_thread()
        assert worker.started.wait(10), "worker did not start"
        if worker.listener is not None:
            worker.listener.listening.wait(5)
        started.append((worker, thread))
        return worker

    yield start
    for worker, _thread in started:
        worker.stop()
    for worker, thread in started:
        thread.join(timeout=worker.shutdown_timeout + 10)
        assert not thread.is_alive(), f"worker {worker.worker_id} did not stop"
