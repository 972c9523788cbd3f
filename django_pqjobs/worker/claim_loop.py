"""The claim loop of a worker: when to claim, how many, and handing the claimed jobs to the
executors (a part of :class:`~django_pqjobs.worker.worker.Worker`, which mixes it in).

Idle, the loop waits for a NOTIFY (or its poll), and the listener claims for it
(:meth:`ClaimLoop._claim_woken`); under a stream of enqueues the workers serving the same
queues take turns claiming (stream mode). Everything else a worker does (its threads, its
lifecycle, recording outcomes) is the Worker's.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import Any

from django.db import DatabaseError

from .. import transitions
from ..context import JobContext
from ..models import Job
from ..policies import DelaySequence
from ..transitions import Fence
from .claiming import ClaimBatch, Undecodable, claim_jobs
from .completer import Completer
from .db import reset_connection
from .listener import Listener
from .reconcile import Reconciler
from .run_settings import RunSettings
from .slots import InFlight, Slot

logger = logging.getLogger("django_pqjobs")

PREFETCH_WINDOW = 0.05  # seconds of work, at the recent job duration, claimed ahead
HOLD_BACK_SCAN = 1000  # due jobs looked at per statement when held jobs block the head
# A worker woken by NOTIFY claims at most once per this many seconds: under a stream of
# enqueues each wake-up then claims every job that arrived meanwhile, instead of every idle
# worker racing for each job with a claim of its own (see _coalesce).
COALESCE_WINDOW = 0.004
# Stream mode (see _enter_stream): how far apart the claims of all the workers serving the
# same queues are while jobs keep coming (each worker claims every STREAM_SPACING times their
# number, at most every STREAM_PERIOD_MAX), and how long a worker's claims may come back
# empty before it goes back to waiting for NOTIFY.
STREAM_SPACING = 0.010
STREAM_PERIOD_MAX = 0.05
STREAM_IDLE = 0.25


class ClaimLoop:
    """The claim loop's part of a :class:`~django_pqjobs.worker.worker.Worker`: the state
    below is the Worker's, set in its ``__init__``."""

    alias: str
    worker_id: str
    queues: list[str] | None
    min_priority: int | None
    concurrency: int
    burst: bool
    max_jobs: int | None
    prefetch_max: int
    poll_intervals: DelaySequence
    loop_error_delays: DelaySequence
    claimed_total: int
    claims: int
    empty_claims: int
    in_flight: InFlight
    completer: Completer
    reconciler: Reconciler
    listener: Listener | None
    _average_job_seconds: float | None
    _loop_tick: float
    _registering: threading.Lock
    _work: queue.SimpleQueue[Slot | None]
    _wake: threading.Event
    _capacity: threading.Event
    _stopping: threading.Event
    _last_claim: float
    _parked: bool
    _streaming: bool
    _stream_found: float
    _serving: dict[str, list[str]]
    _peers: list[tuple[str, list[str] | None]]
    _stream_turn: tuple[int, int]

    def _loop(self) -> None:
        empty_streak = 0
        error_streak = 0
        while not self._stopping.is_set():
            self._loop_tick = time.monotonic()
            capacity = self.concurrency + self._prefetch()
            # held successes are done with their executors
            free = capacity - len(self.in_flight) + self.completer.held
            if self.max_jobs is not None:
                free = min(free, self.max_jobs - self.claimed_total)
                if free <= 0 and not self.in_flight:
                    return
            executors_fed = self._work.qsize() >= self.concurrency
            batch_size = self._batch_size(free, capacity)
            if free <= 0 or (executors_fed and free < capacity // 2):
                self._capacity.wait(1.0)
                self._capacity.clear()
                continue
            self._wake.clear()
            try:
                batch = self._claim(batch_size)
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
            if batch or batch.blocked:
                empty_streak = 0
                self._stream_found = time.monotonic()
                if batch.blocked:
                    # Held jobs at the head of the claim order: move the rest of them out
                    # of the way at once, then claim again.
                    self._hold_back()
                    continue
                if len(batch) == batch_size or self.burst:
                    continue
                # Fewer than asked: nothing else was due. The next NOTIFY (or the poll)
                # brings us back; claiming again now would only find nothing.
                if self._streaming:
                    self._stopping.wait(self._stream_delay())
                elif self._park(self.poll_intervals.delay(0)):
                    self._coalesce()
                continue
            if self.burst:
                if not self.in_flight:
                    return
                self._capacity.wait(0.5)
                self._capacity.clear()
                continue
            if self._streaming:
                if time.monotonic() - self._stream_found < STREAM_IDLE:
                    self._stopping.wait(self._stream_delay())
                    continue
                self._leave_stream()
            delay = self.poll_intervals.delay(empty_streak)
            empty_streak += 1
            if self._park(delay):
                empty_streak = 0
                self._coalesce()

    def _park(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a NOTIFY, idle: meanwhile the listener claims
        for this worker (:meth:`_claim_woken`). True: woken before the timeout."""
        self._parked = True
        try:
            return self._wake.wait(timeout)
        finally:
            self._parked = False

    def _claim_woken(self, connection: Any) -> bool:
        """The listener heard a job this worker is to start at once: while the claim loop
        is parked, claim it here, on the listener's thread and connection, the way the
        claim loop would. Waking the claim loop's thread, whose claim then woke a server
        process of its own, put two waits for a core on the path of every job an idle
        worker started (docs/benchmarks.md, the latency breakdown). False: the claim loop
        claims instead (the listener wakes it): it is busy or claiming, the worker is
        streaming or stopping, a claim was sent within ``COALESCE_WINDOW``, or this claim
        failed."""
        if (
            not self._parked
            or self._streaming
            or self._stopping.is_set()
            or self.max_jobs is not None
            or time.monotonic() - self._last_claim < COALESCE_WINDOW
            or not self._registering.acquire(blocking=False)
        ):
            return False
        try:
            capacity = self.concurrency + self._prefetch()
            free = capacity - len(self.in_flight) + self.completer.held
            if not self._parked or free <= 0 or self._work.qsize() >= self.concurrency:
                return False
            batch_size = self._batch_size(free, capacity)
            try:
                batch = self._claim_locked(batch_size, connection)
            except Exception:
                # the claim loop claims and reports; a lost connection is the listener's
                logger.debug("claiming on the listener's connection failed", exc_info=True)
                return False
        finally:
            self._registering.release()
        if batch.blocked or len(batch) == batch_size:
            self._wake.set()  # more may be due, or held jobs to move: the claim loop goes on
        return True

    def _enter_stream(self) -> None:
        """The listener hears a stream of NOTIFY (and has stopped listening): claim every
        few milliseconds instead, each claim taking what arrived meanwhile (see
        :meth:`_stream_delay`).

        PostgreSQL delivers every notification to every listening connection; under a
        stream of enqueues that delivery, times the workers listening, cost more than
        the enqueues themselves (measured: the same workers polling on a short interval
        let the enqueuers run 2-4 times faster than listening ones). A worker in stream
        mode goes back to LISTEN once its claims have found nothing for ``STREAM_IDLE``.
        """
        self._stream_found = time.monotonic()
        self._streaming = True
        self._wake.set()

    def _stream_delay(self) -> float:
        """Seconds until this worker's next claim in stream mode.

        The workers that serve the same queues take turns: each claims once per period, at
        its own offset within it (its place among them, on the wall clock, which hosts
        share), so together they claim every ``STREAM_SPACING`` seconds. A job waits about
        half that for a claim, however many workers there are, and the claims, spread
        evenly, each take every job that arrived since the one before. Workers that all
        claimed every few milliseconds on their own sent most claims in bunches, each
        taking a job or two for the full price of a claim and a completion.
        """
        place, count = self._stream_turn
        period = min(STREAM_SPACING * count, STREAM_PERIOD_MAX)
        offset = period * place / count
        return period - (time.time() - offset) % period

    def _leave_stream(self) -> None:
        self._streaming = False
        if self.listener is not None:
            self.listener.resume()

    def answers_now(self, queue: str, pid: int) -> bool:
        """Whether this worker is the one to wake at once for a NOTIFY about ``queue`` sent
        by server process ``pid`` (see ``listener.py``). Until it knows its peers (and when
        it is not among them yet) it answers every notification."""
        serving = self._serving.get(queue)
        if serving is None:
            peers = self._peers
            serving = sorted(w for w, queues in peers if queues is None or queue in queues)
            self._serving[queue] = serving
        if self.worker_id not in serving:
            return True
        return serving[pid % len(serving)] == self.worker_id

    def _set_peers(self, peers: list[tuple[str, list[str] | None]]) -> None:
        """The live workers and their queues (from the reporting thread)."""
        self._peers = peers
        self._serving = {}
        mine = None if not self.queues else set(self.queues)
        sharing = sorted(
            w
            for w, queues in peers
            if w == self.worker_id or mine is None or queues is None or mine & set(queues)
        )
        if self.worker_id in sharing:
            self._stream_turn = (sharing.index(self.worker_id), len(sharing))

    def _coalesce(self) -> None:
        """Woken by NOTIFY: claim at once if the last claim was a while ago (an isolated
        enqueue waits for nothing), else wait out the rest of ``COALESCE_WINDOW``.

        Every idle worker hears every NOTIFY. Claiming once per notification made M workers
        send M claims per enqueued job, most of them finding nothing (another worker had
        taken the job), which under a stream of enqueues left the database more busy
        claiming than enqueueing. Within the window the notifications pile up and one
        claim takes every job they announced.
        """
        wait = self._last_claim + COALESCE_WINDOW - time.monotonic()
        if wait > 0:
            self._stopping.wait(wait)

    def _hold_back(self) -> None:
        try:
            while (
                transitions.hold_back(self.alias, self.queues, HOLD_BACK_SCAN, self.min_priority)
                >= HOLD_BACK_SCAN // 2
            ):
                if self._stopping.is_set():
                    return
        except DatabaseError:
            reset_connection(self.alias)  # the claim loop reports errors; this is optional

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

    def _claim(self, batch_size: int) -> ClaimBatch:
        """Claim up to ``batch_size`` jobs and hand them to the executors."""
        with self._registering:
            return self._claim_locked(batch_size)

    def _claim_locked(self, batch_size: int, connection: Any = None) -> ClaimBatch:
        """:meth:`_claim` with ``_registering`` held (on ``connection``: see
        ``transitions.claim``)."""
        self._last_claim = time.monotonic()
        batch = claim_jobs(
            self.alias,
            self.worker_id,
            self.queues,
            batch_size,
            self.min_priority,
            connection=connection,
        )
        self.claims += 1
        self.empty_claims += not batch
        self._dispatch(batch)
        return batch

    def _registered(self, timeout: float) -> bool:
        """Wait until every claim that has committed is in ``in_flight`` (False: a claim
        was still on its way after ``timeout`` seconds)."""
        if not self._registering.acquire(timeout=timeout):
            return False
        self._registering.release()
        return True

    def _dispatch(self, batch: ClaimBatch) -> None:
        if batch.jobs:
            settings = RunSettings.read()
            slots = [self._slot(job, batch.tids.get(job.id), settings) for job in batch.jobs]
            self.in_flight.add_all(slots)  # before any executor can finish one
            if self.reconciler.since is None and batch.jobs[0].locked_at is not None:
                self.reconciler.claimed(batch.jobs[0].locked_at)
            self.claimed_total += len(slots)
            for slot in slots:
                if slot.job.cancel_requested_at is not None:
                    slot.ctx.request_cancel()
                self._work.put(slot)
        for row in batch.undecodable:
            self._fail_undecodable(row)

    def _slot(self, job: Job, tid: str | None = None, settings: RunSettings | None = None) -> Slot:
        ctx = JobContext(job=job, worker_id=self.worker_id, attempt=job.attempts, using=self.alias)
        return Slot(job=job, ctx=ctx, fence=Fence.of(job, tid), settings=settings)

    def _fail_undecodable(self, row: Undecodable) -> None:
        """A claimed row that could not be read fails at once; the others run."""
        slot = self._slot(row.job())
        self.in_flight.add(slot)
        self.claimed_total += 1
        self.completer.submit(slot, row.verdict())
