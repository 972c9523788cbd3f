"""The completer: successes held in stream mode, handler starts written late."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from django_pqjobs import transitions
from django_pqjobs.statuses import FailureKind
from django_pqjobs.transitions import Fence
from django_pqjobs.verdicts import Verdict
from django_pqjobs.worker.completer import HOLD_MAX_AGE, START_MARK_DELAY, Completer
from django_pqjobs.worker.slots import Slot
from tests.helpers import bound


class FakeRecorder:
    alias = "default"

    def __init__(self) -> None:
        self.writes: list[list[tuple[Slot, Verdict]]] = []
        self.wrote = threading.Event()

    def write(self, items: list[tuple[Slot, Verdict]]) -> None:
        self.writes.append(list(items))
        self.wrote.set()


def slot(job_id: int, **columns: Any) -> Slot:
    fields = {
        "concurrency_key": None,
        "batch_id": None,
        "callback_of_id": None,
        "has_dependents": False,
        "waited_on": False,
        **columns,
    }
    job = SimpleNamespace(id=job_id, timeout_seconds=None, **fields)
    return Slot(job=job, ctx=None, fence=Fence(job_id, "w", 1))  # type: ignore[arg-type]


FAILED = Verdict.of_failure(FailureKind.ERROR, "ValueError", "boom")


@pytest.fixture
def running() -> Any:
    started: list[Completer] = []

    def start(**kwargs: Any) -> tuple[Completer, FakeRecorder]:
        recorder = FakeRecorder()
        completer = Completer(recorder, **kwargs)  # type: ignore[arg-type]
        completer.start()
        started.append(completer)
        return completer, recorder

    yield start
    for completer in started:
        completer.stop()
        completer.join(bound(5))


def test_successes_are_held_in_stream_mode_and_written_together(running):
    held = []
    completer, recorder = running(hold=lambda: True, on_held=lambda: held.append(1))
    began = time.monotonic()
    for n in range(3):
        completer.submit(slot(n), Verdict())
    assert completer.held == 3 and len(held) == 3  # the worker counts them as free capacity
    assert recorder.wrote.wait(bound(2))
    assert time.monotonic() - began >= HOLD_MAX_AGE * 0.9
    assert [[s.fence.job_id for s, _ in items] for items in recorder.writes] == [[0, 1, 2]]
    assert completer.held == 0


def test_a_failure_is_written_at_once_while_successes_wait(running):
    completer, recorder = running(hold=lambda: True)
    completer.submit(slot(1), Verdict())
    completer.submit(slot(2), FAILED)
    assert recorder.wrote.wait(HOLD_MAX_AGE / 2)
    assert [s.fence.job_id for s, _ in recorder.writes[0]] == [2]


@pytest.mark.parametrize(
    "columns",
    [
        {"concurrency_key": "k"},  # its slot goes back to the key
        {"batch_id": 3},  # its batch counts it (and may call back)
        {"callback_of_id": 3},
        {"has_dependents": True},  # jobs wait for it
        {"waited_on": True},  # someone waits for its result
    ],
)
def test_a_success_that_frees_something_is_written_at_once_even_in_stream_mode(running, columns):
    completer, recorder = running(hold=lambda: True)
    completer.submit(slot(1), Verdict())
    completer.submit(slot(2, **columns), Verdict())
    assert recorder.wrote.wait(HOLD_MAX_AGE / 2)
    assert [s.fence.job_id for s, _ in recorder.writes[0]] == [2]
    assert completer.held == 1


def test_outside_stream_mode_a_success_is_written_at_once(running):
    completer, recorder = running(hold=lambda: False)
    completer.submit(slot(1), Verdict())
    assert recorder.wrote.wait(HOLD_MAX_AGE / 2)
    assert completer.held == 0


def test_stopping_writes_what_is_held():
    recorder = FakeRecorder()
    completer = Completer(recorder, hold=lambda: True)  # type: ignore[arg-type]
    completer.start()
    completer.submit(slot(7), Verdict())
    completer.stop()
    completer.join(bound(5))
    assert not completer.is_alive()
    assert [s.fence.job_id for items in recorder.writes for s, _ in items] == [7]


def test_a_start_is_written_only_for_a_handler_still_running_after_the_delay(running, monkeypatch):
    marked: list[list[int]] = []
    monkeypatch.setattr(
        transitions, "mark_started", lambda alias, fences: marked.append([f.job_id for f in fences])
    )
    completer, _ = running()
    quick, slow = slot(1), slot(2)
    for s in (quick, slow):
        s.enter_handler()
        completer.started(s)
    quick.finish()  # ended well within the delay: its verdict says more
    time.sleep(START_MARK_DELAY / 2)
    assert marked == []
    deadline = time.monotonic() + 2
    while not marked and time.monotonic() < deadline:
        time.sleep(0.01)
    assert marked == [[2]]
