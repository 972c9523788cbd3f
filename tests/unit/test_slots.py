"""Slots: a duration ends where the executor was done with it, not where it is recorded;
the worker's set of slots holds attempts, not jobs."""

from __future__ import annotations

import time

from django_pqjobs.transitions import Fence
from django_pqjobs.worker.slots import InFlight, Slot


def test_the_duration_stops_when_the_executor_is_done_however_late_it_is_recorded():
    slot = Slot(job=None, ctx=None, fence=None)  # type: ignore[arg-type]
    slot.started = time.monotonic() - 0.2
    assert 190 <= slot.elapsed_ms < 1000  # running: up to now
    slot.finish()
    finished = slot.elapsed_ms
    time.sleep(0.05)  # the verdict waits (the completer is busy, a batch is filling)
    assert slot.elapsed_ms == finished


def test_a_job_claimed_again_before_its_last_attempt_is_forgotten_stays_held():
    """A job retried with no delay can be claimed again by the same worker before the slot
    of the attempt that retried it is removed: removing that slot keeps the new one."""
    first = Slot(job=None, ctx=None, fence=Fence(7, "w", 1))  # type: ignore[arg-type]
    second = Slot(job=None, ctx=None, fence=Fence(7, "w", 2))  # type: ignore[arg-type]
    in_flight = InFlight()
    in_flight.add(first)
    in_flight.add_all([second])  # claimed again, the retry just committed
    assert in_flight.remove_all([first]) == [True]
    assert list(in_flight) == [second] and in_flight.fences() == [second.fence]
    assert in_flight.remove(second) and not in_flight.remove(second)
