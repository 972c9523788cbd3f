"""Shared fixtures: a LISTEN connection and in-process workers running in threads.

Helpers that tests call directly (waiting, launching run_jobs) are in tests/helpers.py.
Transactional tests are cleaned up by tests/fast_flush.py instead of Django's flush.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from django.db import connection

from django_pqjobs.notify import CHANNEL as NOTIFY_CHANNEL

from . import fast_flush
from .helpers import bound

fast_flush.install()


@pytest.fixture
def listener() -> Iterator[psycopg.Connection]:
    """A connection of its own, LISTENing on the channel enqueues notify, and saying so in
    a worker row as workers do (enqueues notify only while some worker listens)."""
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        conn.execute(
            "INSERT INTO pqjobs_worker (worker_id, hostname, concurrency, listening) "
            "VALUES ('test-listener', '', 1, true) "
            "ON CONFLICT (worker_id) DO UPDATE SET listening = true"
        )
        yield conn
        conn.execute("DELETE FROM pqjobs_worker WHERE worker_id = 'test-listener'")


@pytest.fixture
def unknown_job_types_allowed(settings: Any) -> None:
    """Enqueue job types no handler is registered for in this process, as a web process
    does whose handlers live in the workers' code (PQJOBS['ALLOW_UNKNOWN_JOB_TYPES'])."""
    settings.PQJOBS = {**settings.PQJOBS, "ALLOW_UNKNOWN_JOB_TYPES": True}


@pytest.fixture
def worker_factory() -> Iterator[Callable[..., Any]]:
    """Start ``Worker(**options)`` in a thread; every started worker is stopped at teardown."""
    from django_pqjobs.worker.worker import Worker

    started: list[tuple[Worker, threading.Thread]] = []

    def start(**options: Any) -> Worker:
        options.setdefault("shutdown_timeout", 2)
        worker = Worker(**options)
        thread = worker.run_in_thread()
        assert worker.started.wait(bound()), "worker did not start"
        if worker.listener is not None:
            worker.listener.listening.wait(bound(30))
        started.append((worker, thread))
        return worker

    yield start
    for worker, _thread in started:
        worker.stop()
    for worker, thread in started:
        thread.join(timeout=bound(worker.shutdown_timeout + 10))
        assert not thread.is_alive(), f"worker {worker.worker_id} did not stop"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the modules that hold a ``slow`` test first, each module's tests kept together.

    pytest-xdist hands tests out in collection order, so a module of long tests collected
    last keeps one process busy after the others have finished; started first, its tests
    overlap with the many short ones. Modules stay whole so that their module-scoped
    fixtures are set up once per process. Among them, those with a test marked
    ``slow(seconds=N)`` (its duration on a quiet machine) start first, longest first: the
    longest test must not be the last to start."""
    weight: dict[str, float] = {}
    for item in items:
        marker = item.get_closest_marker("slow")
        if marker is not None:
            module = item.nodeid.split("::")[0]
            weight[module] = max(weight.get(module, 0.0), float(marker.kwargs.get("seconds", 0)))
    # stable: the rest keep their collection order
    items.sort(key=lambda item: -weight.get(item.nodeid.split("::")[0], -1.0))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Stretch the hang guard (pyproject's ``timeout``, or a test's own ``timeout`` marker)
    like every wait of the tests (``helpers.bound``): a hang guard sized for a quiet
    machine would fail a test that merely ran slowly beside a second suite. Runs before
    pytest-timeout reads the marker."""
    marker = item.get_closest_marker("timeout")
    seconds = (
        marker.args[0] if marker is not None and marker.args else item.config.getini("timeout")
    )
    if seconds:
        item.add_marker(pytest.mark.timeout(bound(float(seconds))), append=False)
    yield
