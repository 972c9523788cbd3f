"""LISTEN/NOTIFY: wakes the worker as soon as a job is enqueued; polling remains the fallback.

Every idle worker hears every NOTIFY. Waking them all for each job made M workers send M
claims per job, all but one finding nothing, so a stream of enqueues kept the database
busier claiming than enqueueing. So each notification has one *designated* worker, chosen
from the sender's server process id among the live workers serving its queue
(``Worker.answers_now``): it wakes at once. The others wake ``DEFER`` seconds later,
once for all the notifications of that window, unless they claimed meanwhile: a job whose
designated worker is busy (or gone) still starts within ``DEFER``.

Under a stream of enqueues (``STREAM_NOTIFICATIONS`` within ``STREAM_WINDOW``) even that is
too much: the server's delivery of each notification to every listening connection costs
more than the enqueue. The listener then UNLISTENs and tells the worker (``on_stream``),
which claims on a short interval until its claims find nothing, and then calls
:meth:`Listener.resume`.

An idle worker's designated listener claims itself (``claim_now``), on the connection that
heard the notification: waking the claim loop's thread, which then woke its own server
process, put two waits for a core on the path of every job an idle worker starts
(docs/benchmarks.md). ``claim_now`` says no when the claim loop is not idle, and the
listener wakes it as before. It claims only where it found the worker's own row when it
said that it listens: ``LISTEN_DATABASE`` may name another database than the worker's
(``run_jobs --database``), and jobs are never claimed from there.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

import psycopg

from ..notify import CHANNEL, listening_connection
from ..sql import queries

logger = logging.getLogger("django_pqjobs")

DEFER = 0.02
STREAM_WINDOW = 0.1
STREAM_NOTIFICATIONS = 20  # 200 notifications a second

QUERIES = queries("worker_listener")
_LISTEN = QUERIES["listen"].format(channel=CHANNEL)
_UNLISTEN = QUERIES["unlisten"].format(channel=CHANNEL)


class Listener(threading.Thread):
    """Holds a dedicated connection (outside Django's pool) that LISTENs for new jobs.

    ``alias`` may name a direct connection when the main one goes through PgBouncer in
    transaction mode (``PQJOBS['LISTEN_DATABASE']``). ``answers_now(queue, pid)`` says
    whether this worker is the one to wake at once for a notification; ``last_claim()``
    is when the worker last started a claim (``time.monotonic()``).
    """

    def __init__(
        self,
        alias: str,
        queues: Sequence[str] | None,
        wake: threading.Event,
        answers_now: Callable[[str, int], bool] | None = None,
        last_claim: Callable[[], float] | None = None,
        on_stream: Callable[[], None] | None = None,
        worker_id: str | None = None,
        claim_now: Callable[[psycopg.Connection], bool] | None = None,
    ) -> None:
        super().__init__(name="pqjobs-listener", daemon=True)
        self.alias = alias
        self.worker_id = worker_id
        self.queues = set(queues) if queues else None
        self.wake = wake
        self.answers_now = answers_now or (lambda queue, pid: True)
        self.last_claim = last_claim or (lambda: 0.0)
        self.on_stream = on_stream
        self.claim_now = claim_now
        # this connection reaches the worker's own database (its row is there)
        self._claims_here = False
        self.stopping = threading.Event()
        self.listening = threading.Event()
        self._deferred_since: float | None = None
        self._window_start = 0.0
        self._window_count = 0
        self._pause = False  # a stream was heard: stop listening
        self._resume = threading.Event()

    def stop(self) -> None:
        self.stopping.set()
        self._resume.set()

    def resume(self) -> None:
        """LISTEN again (the worker left stream mode)."""
        self._resume.set()

    def run(self) -> None:
        failures = 0
        connected = False
        while not self.stopping.is_set():
            try:
                with listening_connection(self.alias) as conn:
                    conn.execute(_LISTEN)
                    self._say_listening(conn, True)
                    self.listening.set()
                    failures = 0
                    connected = True
                    self.wake.set()  # notifications may have been missed while disconnected
                    while not self.stopping.is_set():
                        # read first: notifies() holds the connection's lock while it yields,
                        # and the claim on this connection needs it
                        notes = list(conn.notifies(timeout=self._timeout(), stop_after=1))
                        for note in notes:
                            self._heard(note.payload, note.pid, conn)
                        self._wake_if_deferred_due()
                        if self._pause:
                            self._stream(conn)
                    self._say_listening(conn, False)
            except psycopg.Error:
                self.listening.clear()
                failures += 1
                delay = min(0.5 * 2**failures, 10.0)
                logger.warning(
                    "LISTEN connection %s; reconnecting in %.1f s",
                    "lost" if connected else "could not be opened",
                    delay,
                    exc_info=failures == 1,
                )
                self.stopping.wait(delay)
        self.listening.clear()

    def _stream(self, conn: psycopg.Connection) -> None:
        """Stop listening while the worker claims on its own; LISTEN again on resume."""
        conn.execute(_UNLISTEN)
        self._say_listening(conn, False)
        self._resume.clear()
        self._deferred_since = None
        if self.on_stream is not None:
            self.on_stream()
        self._resume.wait()
        self._pause = False
        self._window_count = 0
        if not self.stopping.is_set():
            conn.execute(_LISTEN)
            self._say_listening(conn, True)
            self.wake.set()  # what was enqueued while we were not listening

    def _say_listening(self, conn: psycopg.Connection, listening: bool) -> None:
        """Record in this worker's row whether it listens: enqueues notify only while some
        worker does (see ``notify.py``). Set after LISTEN, so nothing is announced to no
        one; the worker then claims once for what was enqueued unannounced meanwhile."""
        if self.worker_id is not None:
            found = conn.execute(QUERIES["say_listening"], [listening, self.worker_id]).rowcount
            self._claims_here = listening and found == 1

    def _heard(self, queue: str, pid: int, conn: psycopg.Connection | None = None) -> None:
        if self.queues is not None and queue not in self.queues:
            return
        if self.on_stream is not None:
            now = time.monotonic()
            if now - self._window_start > STREAM_WINDOW:
                self._window_start, self._window_count = now, 0
            self._window_count += 1
            if self._window_count >= STREAM_NOTIFICATIONS:
                self._pause = True
        if self.answers_now(queue, pid):
            if (
                conn is None
                or self.claim_now is None
                or not self._claims_here
                or not self.claim_now(conn)
            ):
                self.wake.set()
        elif self._deferred_since is None:
            self._deferred_since = time.monotonic()

    def _timeout(self) -> float:
        if self._deferred_since is None:
            return 1.0
        return max(0.0, self._deferred_since + DEFER - time.monotonic())

    def _wake_if_deferred_due(self) -> None:
        since = self._deferred_since
        if since is None or time.monotonic() < since + DEFER:
            return
        self._deferred_since = None
        if self.last_claim() < since:  # a claim since then has covered these jobs
            self.wake.set()
