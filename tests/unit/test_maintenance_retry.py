"""A maintenance step that fails (a history move that met a lock timeout, an outage) runs
again in seconds, backing off to its own interval, with a traceback once and a line a
minute rather than one per try."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.db import OperationalError

from django_pqjobs.worker import maintenance
from django_pqjobs.worker.maintenance import Intervals, Maintenance


def _moves(outcomes: list[Any]) -> Any:
    def shelve_finished(alias: str) -> dict[str, int]:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    return shelve_finished


def test_a_failed_history_move_is_tried_again_soon_backing_off_to_its_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    outcomes: list[Any] = [OperationalError("canceling statement due to lock timeout")] * 7
    outcomes.append({"done": 5})
    monkeypatch.setattr(maintenance, "shelve_finished", _moves(outcomes))
    monkeypatch.setattr(maintenance, "reset_connection", lambda alias: None)
    intervals = Intervals(heartbeat=10, rescue=10, prune=None, schedule=None, stale_timeout=60)
    steps = Maintenance("default", identity=None, in_flight=[], intervals=intervals)  # type: ignore[arg-type]
    task = next(t for t in steps.tasks if t.action.__name__ == "shelve_history")
    assert task.interval == maintenance.SHELVE_INTERVAL == 60

    now, delays = 1000.0, []
    with caplog.at_level(logging.INFO, logger="django_pqjobs"):
        for _ in range(7):
            steps._guarded(task, now)
            delays.append(task.next_run - now)
            now = task.next_run
        assert delays == [2, 4, 8, 16, 32, 60, 60]
        steps._guarded(task, now)  # works again: back to its interval
    assert task.next_run - now == 60 and task.failures == 0

    lines = [r for r in caplog.records if "shelve_history" in r.getMessage()]
    failed = [r for r in lines if "failed" in r.getMessage()]
    assert failed[0].exc_info and not any(r.exc_info for r in failed[1:])  # one traceback
    assert len(failed) == 3  # at the first failure, then once a minute (7 failures in 122 s)
    assert "works again after 7 failures" in lines[-1].getMessage()
