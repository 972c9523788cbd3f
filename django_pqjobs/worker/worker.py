"""The worker process: claims jobs, hands them to executor threads, shuts down cleanly."""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from types import FrameType

from django.db import DatabaseError, connections

from ..conf import conf
from ..context import JobContext
from ..models import Job
from ..policies import DelaySequence
from . import queries
from .completer import Completer
from .db import CONNECTION_ERRORS, reset_connection
from .executor import DEFERRED, JobRunner, Slot
from .listener import Listener
from .maintenance import Maintenance, Watchdog
from .queries import Claimed

logger = logging.getLogger("django_pqjobs")

PREFETCH_WINDOW = 0.05  # seconds of work, at the recent job duration, claimed ahead

_STOP = None  # sentinel put on the work queue to stop one executor thread


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker:
    """Runs jobs with ``concurrency`` executor threads, each with its own DB connection.

    Beside them: a listener (LISTEN/NOTIFY), a maintenance thread (heartbeats, rescue,
    pruning) and a watchdog (timeouts). ``run()`` blocks until stopped and returns an exit
    code; ``stop()`` asks for a graceful shutdown from any thread.

    Arguments left as ``None`` come from ``PQJOBS`` (and the ``WORKER_*`` variables).
    """

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        worker_id: str | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        shutdown_timeout: float | None = None,
        stale_timeout: float | None = None,
        reap_interval: float | None = None,
        heartbeat_interval: float | None = None,
        poll_intervals: DelaySequence | None = None,
        listen: bool | None = None,
        database: str | None = None,
        isolation: str | None = None,
        prefetch_max: int | None = None,
        install_signal_handlers: bool = False,
    ) -> None:
        self.alias = database or conf.DATABASE
        self.concurrency = concurrency if concurrency is not None else conf.CONCURRENCY
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        self.queues = list(queues) if queues else conf.QUEUES
        self.worker_id = worker_id or default_worker_id()
        self.burst = burst
        self.max_jobs = max_jobs
        self.shutdown_timeout = (
            conf.SHUTDOWN_TIMEOUT if shutdown_timeout is None else shutdown_timeout
        )
        self.stale_timeout = conf.STALE_TIMEOUT if stale_timeout is None else stale_timeout
        self.reap_interval = conf.REAP_INTERVAL if reap_interval is None else reap_interval
        self.heartbeat_interval = (
            heartbeat_interval
            if heartbeat_interval is not None
            else min(conf.HEARTBEAT_INTERVAL, self.stale_timeout / 3)
        )
        self.poll_intervals = poll_intervals or conf.POLL_INTERVALS
        self.loop_error_delays = conf.LOOP_ERROR_DELAYS
        self.listen = conf.LISTEN_NOTIFY if listen is None else listen
        self.prefetch_max = conf.PREFETCH_MAX if prefetch_max is None else prefetch_max
        self._average_job_seconds: float | None = None
        self.isolation = isolation or conf.ISOLATION
        if self.isolation not in ("thread", "process"):
            raise ValueError(f"isolation must be 'thread' or 'process', got {self.isolation!r}")
        self.install_signal_handlers = install_signal_handlers
        self.hostname = socket.gethostname()
        self.pid = os.getpid()

        self.claimed_total = 0
        self.outcomes: dict[str, int] = {}
        self._slots: dict[int, Slot] = {}
        self._slots_lock = threading.Lock()
        self._work: queue.Queue[Slot | None] = queue.Queue()
        self._executors: list[threading.Thread] = []
        self._wake = threading.Event()
        self._capacity = threading.Event()
        self._stopping = threading.Event()
        self._signals_seen = 0
        self.started = threading.Event()
        self.listener: Listener | None = None
        self.maintenance: Maintenance | None = None
        self.watchdog: Watchdog | None = None
        self.completer: Completer | None = None
        self.thread: threading.Thread | None = None

    # --- public --------------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; running jobs get ``shutdown_timeout`` seconds, then are released."""
        self._stopping.set()
        self._wake.set()
        self._capacity.set()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def running_slots(self) -> list[Slot]:
        with self._slots_lock:
            return list(self._slots.values())

    def run_in_thread(self, name: str = "pqjobs-worker") -> threading.Thread:
        """Start :meth:`run` in a daemon thread (embedded worker); ``stop()`` ends it."""
        self.thread = threading.Thread(target=self.run, name=name, daemon=True)
        self.thread.start()
        return self.thread

    def run(self) -> int:
        """Run until stopped (or drained, in burst mode). Returns the process exit code."""
        if self.install_signal_handlers:
            self._install_signal_handlers()
        logger.info(
            "worker %s starting: concurrency %s, queues %s%s",
            self.worker_id,
            self.concurrency,
            ", ".join(self.queues) if self.queues else "(all)",
            ", burst" if self.burst else "",
        )
        self._start_threads()
        self.started.set()
        try:
            self._loop()
        finally:
            self._shutdown()
        logger.info(
            "worker %s stopped after %s jobs %s", self.worker_id, self.claimed_total, self.outcomes
        )
        return 0

    # --- the claim loop ------------------------------------------------------------------

    def _loop(self) -> None:
        empty_streak = 0
        error_streak = 0
        while not self._stopping.is_set():
            capacity = self.concurrency + self._prefetch()
            free = capacity - len(self._slots)
            if self.max_jobs is not None:
                free = min(free, self.max_jobs - self.claimed_total)
                if free <= 0 and not self._slots:
                    return
            executors_fed = self._work.qsize() >= self.concurrency
            batch = self._batch_size(free, capacity)
            if free <= 0 or (executors_fed and free < capacity // 2):
                self._capacity.wait(1.0)
                self._capacity.clear()
                continue
            self._wake.clear()
            try:
                jobs = queries.claim(self.alias, self.worker_id, self.queues, batch)
                error_streak = 0
            except Exception as exc:
                # The database restarting or dropping us must not kill the worker; neither
                # may a bug here, but that one is logged with its traceback every time.
                reset_connection(self.alias)
                delay = self.loop_error_delays.delay(error_streak)
                error_streak += 1
                if isinstance(exc, DatabaseError):
                    logger.warning(
                        "claiming jobs failed (attempt %s); retrying in %.1f s",
                        error_streak,
                        delay,
                        exc_info=error_streak == 1,
                    )
                else:
                    logger.exception("unexpected error while claiming jobs")
                self._stopping.wait(delay)
                continue
            if jobs:
                empty_streak = 0
                self._dispatch(jobs)
                continue
            if self.burst:
                if not self._slots:
                    return
                self._capacity.wait(0.5)
                self._capacity.clear()
                continue
            delay = self.poll_intervals.delay(empty_streak)
            empty_streak += 1
            if self._wake.wait(delay):
                empty_streak = 0

    def _prefetch(self) -> int:
        """How many jobs to claim beyond the free executors.

        Enough to keep the executors busy for ``PREFETCH_WINDOW`` at the recent job
        duration, so short jobs are claimed in batches; none for jobs that take longer than
        the window, which would otherwise wait here while another worker sits idle.
        """
        average = self._average_job_seconds
        if not self.prefetch_max or average is None:
            return 0
        wanted = self.concurrency * PREFETCH_WINDOW / max(average, 1e-5)
        return min(self.prefetch_max, int(wanted))

    def _batch_size(self, free: int, capacity: int) -> int:
        """Claim in half-capacity batches: the next batch is claimed while the previous
        one runs and is recorded, so claiming and completing overlap instead of taking
        turns."""
        return min(free, max(self.concurrency, capacity // 2))

    def _observe(self, seconds: float) -> None:
        average = self._average_job_seconds
        self._average_job_seconds = seconds if average is None else average * 0.9 + seconds * 0.1

    def _dispatch(self, jobs: list[Job]) -> None:
        for job in jobs:
            ctx = JobContext(
                job=job, worker_id=self.worker_id, attempt=job.attempts, using=self.alias
            )
            if job.cancel_requested_at is not None:
                ctx._cancel_requested = True
            slot = Slot(job=job, ctx=ctx, claimed=Claimed.of(job))
            with self._slots_lock:
                self._slots[job.id] = slot
            self.claimed_total += 1
            self._work.put(slot)

    # --- executor threads ----------------------------------------------------------------

    def _start_executor(self) -> threading.Thread:
        thread = threading.Thread(
            target=self._execute_forever,
            daemon=True,
            name=f"pqjobs-executor-{len(self._executors) + 1}",
        )
        self._executors.append(thread)
        thread.start()
        return thread

    def _execute_forever(self) -> None:
        runner = JobRunner(self.alias, self.loop_error_delays.delay, self.isolation, self.completer)
        try:
            while True:
                slot = self._work.get()
                if slot is _STOP:
                    return
                assert slot is not None
                try:
                    outcome = runner.run(slot)
                    self._observe(time.monotonic() - slot.started)
                except Exception:
                    outcome = "error"
                    logger.exception(
                        "could not record the outcome of job %s; it stays running until rescued",
                        slot.job.id,
                    )
                with slot.lock:
                    abandoned = slot.abandoned
                    slot.state = "done"
                if abandoned:
                    logger.warning(
                        "abandoned job %s finally returned; its outcome was discarded", slot.job.id
                    )
                    return  # a replacement thread already took this thread's place
                if outcome != DEFERRED:  # else the completer finishes the slot
                    self._finished(slot, outcome)
        finally:
            runner.close()
            connections.close_all()

    def _finished(self, slot: Slot, outcome: str) -> None:
        with self._slots_lock:
            self._slots.pop(slot.claimed.job_id, None)
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        self._capacity.set()

    def replace_executor(self, slot: Slot) -> None:
        """Called by the watchdog after abandoning ``slot``'s thread: keep capacity."""
        self._finished(slot, "timeout")
        if not self._stopping.is_set():
            self._start_executor()

    # --- lifecycle -----------------------------------------------------------------------

    def _start_threads(self) -> None:
        self.completer = Completer(self.alias, self._finished, self.loop_error_delays.delay)
        self.completer.start()
        for _ in range(self.concurrency):
            self._start_executor()
        if self.listen:
            self.listener = Listener(conf.LISTEN_DATABASE, self.queues, self._wake)
            self.listener.start()
        self.maintenance = Maintenance(self)
        self.maintenance.start()
        self.watchdog = Watchdog(self)
        self.watchdog.start()

    def _shutdown(self) -> None:
        self._stopping.set()
        self._release_unstarted()
        deadline = time.monotonic() + self.shutdown_timeout
        if self._slots:
            logger.info(
                "waiting up to %.0f s for %s running jobs", self.shutdown_timeout, len(self._slots)
            )
        while self._slots and time.monotonic() < deadline and self._signals_seen < 2:
            self._capacity.wait(0.1)
            self._capacity.clear()
        leftover = [s.claimed for s in self.running_slots() if not s.abandoned]
        if leftover:
            self._release(leftover)
        for _ in self._executors:
            self._work.put(_STOP)
        if self.completer is not None:
            self.completer.stop()
            self.completer.join(timeout=10)
        for service in (self.listener, self.maintenance, self.watchdog):
            if service is not None:
                service.stop()
        for service in (self.listener, self.maintenance, self.watchdog):
            if service is not None:
                service.join(timeout=5)
        try:
            queries.unregister_worker(self.alias, self.worker_id)
        except DatabaseError:
            logger.warning("could not remove worker record %s", self.worker_id, exc_info=True)
        connections.close_all()

    def _release_unstarted(self) -> None:
        """Give back prefetched jobs no executor has started: no reason to run them now."""
        unstarted: list[Slot] = []
        while True:
            try:
                slot = self._work.get_nowait()
            except queue.Empty:
                break
            if slot is not None:
                unstarted.append(slot)
        if unstarted:
            self._release([s.claimed for s in unstarted])
            for slot in unstarted:
                self._finished(slot, "released")

    def _release(self, claims: list[Claimed]) -> None:
        for attempt in range(3):
            try:
                released = queries.release(self.alias, claims)
                logger.warning(
                    "released %s unfinished jobs back to ready: %s", len(released), released
                )
                return
            except CONNECTION_ERRORS:
                reset_connection(self.alias)
                time.sleep(0.5 * (attempt + 1))
        logger.error(
            "could not release %s jobs; they will be rescued after the stale timeout", len(claims)
        )

    def _install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals_seen += 1
        name = signal.Signals(signum).name
        if self._signals_seen == 1:
            logger.warning(
                "%s received: finishing running jobs (up to %.0f s), send again to exit now",
                name,
                self.shutdown_timeout,
            )
            self.stop()
        else:
            logger.warning("%s received again: exiting immediately", name)
            os._exit(1)
