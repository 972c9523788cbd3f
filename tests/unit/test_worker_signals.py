"""The signal handler runs in the middle of whatever the main thread was doing."""

from __future__ import annotations

import signal
import threading

from django_pqjobs.worker.worker import Worker
from tests.helpers import bound


def test_sigterm_during_a_wait_on_the_stop_event_does_not_deadlock():
    """SIGTERM can land while the main thread is inside ``Event.wait()`` on the very event
    the handler sets (the claim loop waits on it between its turns), holding that event's
    lock: a handler that set the event itself waited for the lock for ever (the worker
    hung on its first SIGTERM)."""
    worker = Worker(concurrency=1, worker_id="signalled")
    handled = threading.Event()

    def deliver() -> None:
        worker._on_signal(signal.SIGTERM, None)
        handled.set()

    # the lock Event.wait() holds around its checks, held here as the interrupted frame would
    with worker._stopping._cond:
        handler = threading.Thread(target=deliver, daemon=True)
        handler.start()
        assert handled.wait(bound(2)), "the signal handler blocked on the stop event's lock"
    # once the interrupted frame goes on (and lets go of the lock), the worker stops
    assert worker._stopping.wait(bound(2))
