"""An executor looks at its connections (a select() per connection) only after it sat idle;
between back-to-back jobs it trusts what psycopg already knows. The listener says whether
its connection was lost or never opened."""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass, field
from types import SimpleNamespace

import psycopg
import pytest

from django_pqjobs.context import JobContext
from django_pqjobs.models import Job
from django_pqjobs.transitions import Fence
from django_pqjobs.worker import db, executor, listener
from django_pqjobs.worker.executor import LOOK_AFTER_IDLE, Executor
from django_pqjobs.worker.slots import Slot
from tests.helpers import bound


@dataclass
class Raw:
    """What the check reads of a psycopg connection."""

    sock: socket.socket
    closed: bool = False
    broken: bool = False

    def fileno(self) -> int:
        return self.sock.fileno()


@dataclass
class Wrapper:
    """What the check reads of a Django connection wrapper."""

    alias: str
    connection: Raw | None
    in_atomic_block: bool = False


@dataclass
class Dropped:
    aliases: list[str] = field(default_factory=list)


@pytest.fixture
def dropped(monkeypatch) -> Dropped:
    seen = Dropped()
    monkeypatch.setattr(db, "reset_connection", seen.aliases.append)
    return seen


@pytest.fixture
def sockets():
    """(ours, the server's end) pairs; closing the server's end makes ours readable."""
    made: list[socket.socket] = []

    def pair() -> tuple[socket.socket, socket.socket]:
        ours, theirs = socket.socketpair()
        made.extend((ours, theirs))
        return ours, theirs

    yield pair
    for sock in made:
        sock.close()


def test_a_look_finds_the_connections_the_server_closed(dropped, sockets) -> None:
    alive, _server = sockets()
    gone, server_side = sockets()
    server_side.close()
    db.drop_connections_closed_by_server([Wrapper("a", Raw(alive)), Wrapper("b", Raw(gone))])
    assert dropped.aliases == ["b"]


def test_without_a_look_only_what_psycopg_knows_is_dropped(dropped, sockets) -> None:
    gone, server_side = sockets()
    server_side.close()
    known, _ = sockets()
    db.drop_connections_closed_by_server(
        [Wrapper("unseen", Raw(gone)), Wrapper("known", Raw(known, broken=True))], look=False
    )
    assert dropped.aliases == ["known"]


def test_connections_inside_a_transaction_or_never_opened_are_left_alone(dropped, sockets):
    gone, server_side = sockets()
    server_side.close()
    db.drop_connections_closed_by_server(
        [Wrapper("atomic", Raw(gone), in_atomic_block=True), Wrapper("unopened", None)]
    )
    assert dropped.aliases == []


def noop_slot(job_id: int) -> Slot:
    job = Job(id=job_id, job_type="tests.noop", payload={}, attempts=1, locked_by="w")
    ctx = JobContext(job=job, worker_id="w", attempt=1, using="default")
    return Slot(job=job, ctx=ctx, fence=Fence.of(job))


def test_the_executor_looks_after_idling_and_not_between_back_to_back_jobs(monkeypatch):
    looks: list[bool] = []
    monkeypatch.setattr(
        executor, "drop_connections_closed_by_server", lambda wrappers, look: looks.append(look)
    )
    clock = iter([100.0, 100.0 + LOOK_AFTER_IDLE / 2, 100.0 + LOOK_AFTER_IDLE / 2])
    times = {"now": 0.0}

    def monotonic() -> float:
        return times["now"]

    monkeypatch.setattr(executor, "time", SimpleNamespace(monotonic=monotonic))
    runner = Executor("default", "thread", lambda slot: None)
    for job_id, now in enumerate(clock, start=1):
        times["now"] = now
        verdict, _ = runner.run(noop_slot(job_id))
        assert verdict.succeeded
    times["now"] = 100.0 + LOOK_AFTER_IDLE * 10  # idle since the last job ended
    runner.run(noop_slot(9))
    runner.close()
    assert looks == [True, False, False, True]


class ListeningConnection:
    """Opens, LISTENs, then finds the server gone."""

    def __enter__(self) -> ListeningConnection:
        return self

    def __exit__(self, *exc_info: object) -> None:
        pass

    def execute(self, sql: str, params: object = None) -> None:
        pass

    def notifies(self, timeout: float, stop_after: int) -> list[object]:
        raise psycopg.OperationalError("server closed the connection unexpectedly")


def test_the_listener_says_lost_only_of_a_connection_it_had(monkeypatch, caplog) -> None:
    attempts = iter([psycopg.OperationalError("connection refused"), ListeningConnection()])

    def connect(alias: str) -> ListeningConnection:
        opened = next(attempts)
        if isinstance(opened, Exception):
            raise opened
        return opened

    monkeypatch.setattr(listener, "listening_connection", connect)
    monkeypatch.setattr(listener.Listener, "_say_listening", lambda *args: None)
    caplog.set_level(logging.WARNING, "django_pqjobs")
    heard = listener.Listener("default", None, threading.Event())
    heard.start()
    try:
        deadline = time.monotonic() + 10
        while len(caplog.records) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        heard.stop()
        heard.join(bound(5))
    assert [record.getMessage() for record in caplog.records[:2]] == [
        "LISTEN connection could not be opened; reconnecting in 1.0 s",
        "LISTEN connection lost; reconnecting in 1.0 s",
    ]
