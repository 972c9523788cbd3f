"""The worker process: claims jobs, hands them to executor threads, shuts down cleanly."""

from __future__ import annotations

import logging
import os
import queue
import shlex
import signal
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from types import FrameType

from django.db import DatabaseError, connections

from .. import capacity, endings, options, transitions
from ..conf import conf
from ..durations import in_words
from ..policies import DelaySequence
from ..printable import counted, printable
from ..statuses import Outcome
from .claim_loop import ClaimLoop
from .completer import Completer
from .db import CONNECTION_ERRORS, reset_connection
from .executor import Executor
from .heartbeats import WorkerIdentity, heartbeat, unregister_worker
from .listener import Listener
from .maintenance import Intervals, Maintenance, aging_interval
from .reconcile import Reconciler
from .recorder import Recorder
from .reporting import Reporter, ReportIntervals
from .slots import InFlight, Slot
from .tally import Tally
from .watchdog import Watchdog

logger = logging.getLogger("django_pqjobs")

_STOP = None  # sentinel put on the work queue to stop one executor thread


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Worker(ClaimLoop):
    """Runs ``concurrency`` jobs at once on executor threads, each with its own DB
    connection. ``max_concurrency`` (default: ``concurrency``) threads are started: an
    operator's live setting (``capacity.py``) moves the concurrency between 1 and that.

    Beside them: a completer (records every verdict), a listener (LISTEN/NOTIFY), a
    maintenance thread (heartbeats, rescue, pruning, schedules) and a watchdog (timeouts).
    ``run()`` blocks until stopped and returns an exit code; ``stop()`` asks for a
    graceful shutdown from any thread.

    Arguments left as ``None`` come from ``PQJOBS`` (and the ``WORKER_*`` variables),
    except ``min_priority``: a worker given one (a number, a ``Priority`` or its name) takes
    only jobs of at least that priority; without one it takes every priority.
    """

    def __init__(
        self,
        *,
        concurrency: int | None = None,
        max_concurrency: int | None = None,
        queues: Sequence[str] | None = None,
        min_priority: int | str | None = None,
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
        log_successes: bool | None = None,
        install_signal_handlers: bool = False,
    ) -> None:
        self.alias = database or conf.DATABASE
        self.concurrency = concurrency if concurrency is not None else conf.CONCURRENCY
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {self.concurrency}")
        self.started_concurrency = self.concurrency
        self.max_concurrency = capacity.max_concurrency(self.concurrency, max_concurrency)
        self.queues = [options.queue_name(q, "queue") for q in queues] if queues else conf.QUEUES
        self.min_priority = (
            None if min_priority is None else options.priority(min_priority, "min_priority")
        )
        self.worker_id = options.worker_id(worker_id) if worker_id else default_worker_id()
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
        self.isolation = options.isolation(isolation or conf.ISOLATION)
        self.install_signal_handlers = install_signal_handlers
        self.identity = WorkerIdentity(
            self.worker_id,
            socket.gethostname(),
            os.getpid(),
            self.queues,
            self.concurrency,
            listens=self.listen,
            started_concurrency=self.started_concurrency,
            max_concurrency=self.max_concurrency,
        )

        self.claimed_total = 0
        self.claims = 0  # claim statements sent
        self.empty_claims = 0  # ... that found nothing
        self.outcomes: dict[str, int] = {}
        self.tally = Tally()
        self._loop_tick = time.monotonic()
        self.in_flight = InFlight()
        # Held from before each claim until its jobs are in in_flight: the reconcile waits
        # for it, so it never takes a job just claimed for one this worker is not running.
        self._registering = threading.Lock()
        self.reconciler = Reconciler(
            self.alias, self.worker_id, self.in_flight, self._registered, self._reconciled
        )
        self._counts_lock = threading.Lock()
        # SimpleQueue, not Queue: its put and get are C, with no Condition to notify, which
        # halved the context switches per job of short jobs (measured under the mixed
        # workload, docs/benchmarks.md).
        self._work: queue.SimpleQueue[Slot | None] = queue.SimpleQueue()
        self._executors: list[threading.Thread] = []
        self._wake = threading.Event()
        self._last_claim = 0.0
        # The claim loop waits for a NOTIFY (or its poll): the listener may claim for it
        # (_claim_woken).
        self._parked = False
        self._streaming = False
        self._stream_found = 0.0  # when a claim in stream mode last found jobs
        self._serving: dict[str, list[str]] = {}  # queue -> live workers that serve it
        self._peers: list[tuple[str, list[str] | None]] = []
        # (this worker's place, how many) among the live workers sharing a queue with it
        self._stream_turn = (0, 1)
        self._capacity = threading.Event()
        self._stopping = threading.Event()
        self._give_up_at: float | None = None
        self._signals_seen = 0
        self.started = threading.Event()
        self.recorder = Recorder(
            self.alias,
            self._recorded,
            self.loop_error_delays,
            self._keep_recording,
            log_successes=conf.LOG_SUCCESSES if log_successes is None else log_successes,
            on_recorded_all=self._recorded_all,
        )
        self.completer = Completer(
            self.recorder,
            hold=lambda: self._streaming and not self._stopping.is_set(),
            on_held=self._free_capacity,
        )
        self.listener: Listener | None = None
        self.maintenance: Maintenance | None = None
        self.watchdog: Watchdog | None = None
        self.reporter: Reporter | None = None
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
        return self.in_flight.snapshot()

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
            "worker %s starting: concurrency %s, queues %s%s%s",
            self.worker_id,
            self.concurrency,
            ", ".join(self.queues) if self.queues else "(all)",
            "" if self.min_priority is None else f", priority >= {self.min_priority}",
            ", burst" if self.burst else "",
            extra={"worker_id": self.worker_id},
        )
        self._start_threads()
        self.started.set()
        try:
            self._loop()
        finally:
            self._shutdown()
        counts = ", ".join(f"{n} {name}" for name, n in sorted(self.outcomes.items()))
        logger.info(
            "worker %s stopped after %s (%s); %s, %s of them empty",
            self.worker_id,
            counted(self.claimed_total, "attempt"),
            counts or "none",
            counted(self.claims, "claim"),
            self.empty_claims,
            extra={
                "worker_id": self.worker_id,
                "outcomes": dict(self.outcomes),
                "claims": self.claims,
                "empty_claims": self.empty_claims,
            },
        )
        return 0

    # --- claim loop callbacks ---------------------------------------------------------

    def _reconciled(self, released: list[transitions.Unheld]) -> None:
        """The reconcile gave back attempts: count them with the attempts released."""
        with self._counts_lock:
            self.outcomes["released"] = self.outcomes.get("released", 0) + len(released)
        self.tally.add_all([(job.job_type, job.queue, "released", 0) for job in released])

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
        executor = Executor(self.alias, self.isolation, self._handler_started)
        try:
            while True:
                slot = self._work.get()
                if slot is _STOP:
                    return
                assert slot is not None
                verdict, recorded = executor.attempt(slot)
                self._observe(time.monotonic() - slot.started)
                if slot.finish():
                    logger.warning(
                        "abandoned job %s finally returned; its outcome was discarded",
                        slot.job.id,
                    )
                    return  # a replacement thread already took this thread's place
                if recorded is None:
                    self.completer.submit(slot, verdict)
                else:
                    self.recorder.report(slot, verdict, recorded)
        finally:
            executor.close()
            connections.close_all()

    def _handler_started(self, slot: Slot) -> None:
        self.completer.started(slot)
        if self.watchdog is not None:
            self.watchdog.started(slot)

    def _recorded(self, slot: Slot, status: Outcome) -> None:
        """``slot``'s verdict is written (or given up on), ``status`` its outcome: count it,
        free the slot."""
        self._recorded_all([(slot, status)])

    def _recorded_all(self, recorded: list[tuple[Slot, Outcome]]) -> None:
        """The same for many slots: each lock taken once."""
        held = self.in_flight.remove_all([slot for slot, _ in recorded])
        counted = [pair for pair, was_held in zip(recorded, held, strict=True) if was_held]
        if not counted:
            return
        with self._counts_lock:
            for _, status in counted:
                self.outcomes[status] = self.outcomes.get(status, 0) + 1
        self.tally.add_all(
            [(s.job.job_type, s.job.queue, status, s.elapsed_ms) for s, status in counted]
        )
        self._free_capacity()

    def _free_capacity(self) -> None:
        if not self._capacity.is_set():  # set() takes a lock and notifies
            self._capacity.set()

    def set_concurrency(self, wanted: int | None) -> None:
        """Run ``wanted`` jobs at once from now on (None: the concurrency it was started
        with), within 1 and ``max_concurrency``. Jobs running beyond a lowered concurrency
        finish; the claims wait until fewer run."""
        value = capacity.bounded(wanted, self.started_concurrency, self.max_concurrency)
        if value == self.concurrency:
            return
        logger.info(
            "worker %s: concurrency %s -> %s%s",
            self.worker_id,
            self.concurrency,
            value,
            ""
            if wanted is None or wanted == value
            else f" (asked {wanted}, bounds 1-{self.max_concurrency})",
        )
        self.concurrency = value
        self.identity = replace(self.identity, concurrency=value)
        if self.maintenance is not None:
            self.maintenance.identity = self.identity
        self._free_capacity()

    def _keep_recording(self) -> bool:
        """Whether the recorder keeps retrying through a database outage: always while the
        worker runs; at shutdown, until the grace period is over."""
        return self._give_up_at is None or time.monotonic() < self._give_up_at

    def _abandoned(self) -> None:
        """The watchdog gave up on a thread: keep the capacity with a new one."""
        if not self._stopping.is_set():
            self._start_executor()

    # --- lifecycle -----------------------------------------------------------------------

    def _start_threads(self) -> None:
        self.completer.start()
        for _ in range(self.max_concurrency):  # the live concurrency may use each of them
            self._start_executor()
        try:
            # The worker's row first: its listener says in it that it listens.
            heartbeat(self.alias, self.identity, [])
        except DatabaseError:
            reset_connection(self.alias)
            logger.warning("could not record worker %s yet", self.worker_id, exc_info=True)
        if self.listen:
            # A worker on another alias (run_jobs --database) listens there too, unless a
            # direct connection for LISTEN is configured.
            listen_alias = conf.LISTEN_DATABASE if conf.raw("LISTEN_DATABASE") else self.alias
            self.listener = Listener(
                listen_alias,
                self.queues,
                self._wake,
                answers_now=self.answers_now,
                last_claim=lambda: self._last_claim,
                on_stream=self._enter_stream,
                worker_id=self.worker_id,
                claim_now=self._claim_woken,
            )
            self.listener.start()
        self.maintenance = Maintenance(
            self.alias,
            self.identity,
            self.in_flight,
            Intervals(
                heartbeat=self.heartbeat_interval,
                rescue=self.reap_interval,
                prune=conf.PRUNE_INTERVAL,
                schedule=conf.SCHEDULER_INTERVAL,
                stale_timeout=self.stale_timeout,
                flow_sweep=conf.FLOW_SWEEP_INTERVAL,
                aging=aging_interval(conf.PRIORITY_AGING),
                reconcile=conf.RECONCILE_INTERVAL,
            ),
            self.reconciler,
        )
        self.maintenance.start()
        self.watchdog = Watchdog(
            self.in_flight, conf.TIMEOUT_GRACE, self.completer.submit, self._abandoned
        )
        self.watchdog.start()
        self.reporter = Reporter(
            self.alias,
            self.worker_id,
            self.tally,
            ReportIntervals(
                stats=conf.STATS_INTERVAL,
                summary=conf.LOG_SUMMARY_INTERVAL,
                liveness=self.heartbeat_interval,
            ),
            loop_age=lambda: time.monotonic() - self._loop_tick,
            running=lambda: len(self.in_flight),
            on_peers=self._set_peers,
            on_concurrency=self.set_concurrency,
        )
        self.reporter.start()

    def _shutdown(self) -> None:
        self._stopping.set()
        with self._registering:
            pass  # a claim under way (the listener's) has put its jobs on the queue
        self._release_unstarted()
        deadline = time.monotonic() + self.shutdown_timeout
        self._give_up_at = deadline + 5
        if self.in_flight:
            logger.info(
                "waiting up to %.0f s for %s",
                self.shutdown_timeout,
                counted(len(self.in_flight), "running job"),
            )
        while self.in_flight and time.monotonic() < deadline and self._signals_seen < 2:
            self._capacity.wait(0.1)
            self._capacity.clear()
        # Slots past their handler have a verdict on its way to the completer.
        leftover = [s for s in self.in_flight if s.state in ("queued", "handler")]
        if leftover:
            self._release(leftover)
        for _ in self._executors:
            self._work.put(_STOP)
        self.completer.stop()
        # The recorder retries through an outage until _give_up_at: the counts of the last
        # verdicts are added when they are written, before the final report below.
        self.completer.join(timeout=max(10.0, self._give_up_at - time.monotonic()))
        services = (self.listener, self.maintenance, self.watchdog, self.reporter)
        for service in services:
            if service is not None:
                service.stop()
        # The record goes as soon as no heartbeat can write it back, not after the listener,
        # which notices the stop within a second: the process may not have that second
        # (runserver's autoreloader kills its child 0.25 s after Ctrl-C, an embedded
        # worker's process is on its way out), and a record left behind looks like a worker.
        if self.maintenance is not None:
            self.maintenance.join(timeout=5)
        try:
            unregister_worker(self.alias, self.worker_id)
        except DatabaseError:
            logger.warning("could not remove worker record %s", self.worker_id, exc_info=True)
        for service in services:
            if service is not None:
                service.join(timeout=5)
        if self.reporter is not None:
            self.reporter.final_report()
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
            self._release(unstarted)

    def _release(self, slots: list[Slot]) -> None:
        fences = [slot.fence for slot in slots]
        for attempt in range(3):
            try:
                released = transitions.release(self.alias, fences)
            except CONNECTION_ERRORS:
                reset_connection(self.alias)
                time.sleep(0.5 * (attempt + 1))
                continue
            logger.warning(
                "released %s back to ready: %s", counted(len(released), "unfinished job"), released
            )
            given_back = set(released)
            for slot in slots:
                if slot.fence.job_id in given_back:
                    endings.announce(slot.job, "released")
                self._recorded(slot, "released")
            return
        logger.error(
            "could not release %s; they will be rescued after the stale timeout",
            counted(len(slots), "job"),
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
            # Not stop() here: the handler runs wherever the main thread was, possibly
            # inside Event.wait() on one of the events stop() sets, holding that event's
            # lock, and setting it from here would wait for that lock for ever.
            threading.Thread(target=self.stop, name="pqjobs-stop", daemon=True).start()
        else:
            logger.warning("%s received again: exiting now%s", name, self._left_running())
            os._exit(1)

    def _left_running(self) -> str:
        """What a forced exit leaves ``running`` in the table, and how to free it.

        The slots are read by another thread: the main thread, which this signal handler
        interrupted, may hold the lock of ``in_flight``. If it does, the reader gives up
        after a second and the line names no job.
        """
        found: list[list[Slot]] = []
        reader = threading.Thread(
            target=lambda: found.append(self.in_flight.snapshot()), name="pqjobs-exit", daemon=True
        )
        reader.start()
        reader.join(1.0)
        command = f"manage.py reap_stale --worker-id {shlex.quote(printable(self.worker_id))}"

        def free(it: str) -> str:
            return (
                f"the stale-job rescue gives {it} back after {in_words(self.stale_timeout)} "
                f"without a heartbeat (STALE_TIMEOUT), or free {it} now with `{command}`"
            )

        if not found:
            return "; " + free("the jobs it was running")
        slots = sorted(found[0], key=lambda slot: slot.job.id)
        if not slots:
            return " (no job was running)"
        shown = ", ".join(f"{s.job.id} ({printable(s.job.job_type)})" for s in slots[:10])
        more = f" and {len(slots) - 10} more" if len(slots) > 10 else ""
        left = f"{counted(len(slots), 'job')} left running: {shown}{more}"
        return f", {left}; " + free("it" if len(slots) == 1 else "them")
