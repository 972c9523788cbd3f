"""A slot's duration ends where its executor was done with it, not where it is recorded."""

from __future__ import annotations

import time

from django_pqjobs.worker.slots import Slot


def test_the_duration_stops_when_the_executor_is_done_however_late_it_is_recorded():
    slot = Slot(job=None, ctx=None, fence=None)  # type: ignore[arg-type]
    slot.started = time.monotonic() - 0.2
    assert 190 <= slot.elapsed_ms < 1000  # running: up to now
    slot.finish()
    finished = slot.elapsed_ms
    time.sleep(0.05)  # the verdict waits (the completer is busy, a batch is filling)
    assert slot.elapsed_ms == finished
