"""LISTEN/NOTIFY: wakes the worker as soon as a job is enqueued; polling remains the fallback."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

import psycopg
from django.db import connections

from ..enqueue import NOTIFY_CHANNEL

logger = logging.getLogger("django_pqjobs")


class Listener(threading.Thread):
    """Holds a dedicated connection (outside Django's pool) that LISTENs for new jobs.

    ``alias`` may name a direct connection when the main one goes through PgBouncer in
    transaction mode (``PQJOBS['LISTEN_DATABASE']``).
    """

    def __init__(self, alias: str, queues: Sequence[str] | None, wake: threading.Event) -> None:
        super().__init__(name="pqjobs-listener", daemon=True)
        self.alias = alias
        self.queues = set(queues) if queues else None
        self.wake = wake
        self.stopping = threading.Event()
        self.listening = threading.Event()

    def stop(self) -> None:
        self.stopping.set()

    def _connect(self) -> psycopg.Connection:
        params = connections[self.alias].get_connection_params()
        params.pop("cursor_factory", None)
        return psycopg.connect(**params, autocommit=True)

    def run(self) -> None:
        failures = 0
        while not self.stopping.is_set():
            try:
                with self._connect() as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self.listening.set()
                    failures = 0
                    self.wake.set()  # notifications may have been missed while disconnected
                    while not self.stopping.is_set():
                        for note in conn.notifies(timeout=1.0):
                            if self.queues is None or note.payload in self.queues:
                                self.wake.set()
            except psycopg.Error:
                self.listening.clear()
                failures += 1
                delay = min(0.5 * 2**failures, 10.0)
                logger.warning(
                    "LISTEN connection lost; reconnecting in %.1f s", delay, exc_info=failures == 1
                )
                self.stopping.wait(delay)
        self.listening.clear()
