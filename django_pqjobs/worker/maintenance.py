"""The maintenance thread: the periodic work beside the executors.

Heartbeats (and the cancel requests they bring back), the reconcile of the worker's own
jobs (``reconcile.py``), stale-job rescue, the expiry of jobs past their deadline,
retention pruning, moving finished jobs to history, the scheduler pass and priority aging,
each on its own interval.
It survives database outages: a step that fails is logged and tried again 2 s later, then
twice as late after each failure in a row, up to its own interval (RETRY_FIRST); the first
step that works again after a failure brings the reconcile forward (a failover may have
lost the end of jobs this worker ran).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from django.db import DatabaseError, connections

from .. import flow, transitions
from ..conf import Aging
from ..printable import counted, printable
from ..schedules.scheduler import Scheduler
from .db import reset_connection
from .heartbeats import WorkerIdentity, heartbeat
from .housekeeping import (
    age_priorities,
    expire_overdue,
    prune_finished,
    reap_stale,
    release_flow_blocked,
    shelve_finished,
    wake_parked,
)
from .reconcile import Reconciler
from .slots import InFlight

logger = logging.getLogger("django_pqjobs")

OUTAGE_REPORT_INTERVAL = 60.0
AGING_SWEEP_INTERVAL = 5.0
AGING_SWEEP_MIN_INTERVAL = 0.5
SHELVE_INTERVAL = 60.0
# After a step fails it runs again this soon, then twice as late after each failure in a
# row, up to its own interval: a history move or a prune that met a lock timeout tries
# again in seconds, not a minute later; an outage is not hammered.
RETRY_FIRST = 2.0
RECONCILE_RETRY = 1.0


def aging_interval(aging: dict[str, Aging]) -> float | None:
    """How often the priority aging sweep runs: every 5 s, or half the shortest ``every``
    when that is shorter (at least every 0.5 s), so each raise comes at most half an
    ``every`` late; None (never) when no queue ages."""
    if not aging:
        return None
    shortest = min(rule.every for rule in aging.values())
    return max(AGING_SWEEP_MIN_INTERVAL, min(AGING_SWEEP_INTERVAL, shortest / 2))


@dataclass(frozen=True)
class Intervals:
    """Seconds between runs of each step; None turns a step off."""

    heartbeat: float
    rescue: float
    prune: float | None
    schedule: float | None
    stale_timeout: float
    flow_sweep: float | None = 0.5
    pause_check: float | None = 1.0
    expire: float | None = 1.0
    aging: float | None = AGING_SWEEP_INTERVAL
    shelve: float | None = SHELVE_INTERVAL
    reconcile: float | None = None  # None: only after a reconnect


class Periodic:
    """Runs ``action`` every ``interval`` seconds; the first run is after ``first_delay``."""

    def __init__(
        self, interval: float | None, action: Callable[[], object], first_delay: float = 0.0
    ) -> None:
        self.interval = interval
        self.action = action
        self.next_run = time.monotonic() + first_delay
        self.failures = 0
        self.last_report = 0.0
        self.soon = False

    def due(self, now: float) -> bool:
        return (self.interval is not None or self.soon) and now >= self.next_run

    def run_soon(self, delay: float = 0.0) -> None:
        """Run after ``delay`` seconds (at the next turn), even without an interval."""
        self.soon = True
        self.next_run = time.monotonic() + delay

    def run(self, now: float) -> None:
        self.soon = False
        self.next_run = now + (self.interval or 0.0)
        self.action()

    def failed(self, now: float) -> None:
        """Count a failure, and run again after a backoff from ``RETRY_FIRST`` seconds
        (never later than the interval; a step run only when asked, run_soon(), is tried
        again until it works, at most OUTAGE_REPORT_INTERVAL apart)."""
        self.failures += 1
        backoff = RETRY_FIRST * 2 ** min(self.failures - 1, 30)
        if self.interval is None:
            self.soon = True
            self.next_run = now + min(OUTAGE_REPORT_INTERVAL, backoff)
        else:
            self.next_run = now + min(self.interval, backoff)


class Maintenance(threading.Thread):
    # The steps (methods of this class), in the order they run when several are due; each
    # is run, and fails, on its own.
    STEPS = (
        "heartbeat",
        "reconcile",
        "rescue",
        "prune",
        "shelve_history",
        "schedule",
        "release_flow_blocked",
        "watch_pauses",
        "expire",
        "age_priorities",
    )

    def __init__(
        self,
        alias: str,
        identity: WorkerIdentity,
        in_flight: InFlight,
        intervals: Intervals,
        reconciler: Reconciler | None = None,
    ) -> None:
        super().__init__(name="pqjobs-maintenance", daemon=True)
        self.alias = alias
        self.identity = identity
        self.in_flight = in_flight
        self.intervals = intervals
        self.reconciler = reconciler
        self.connection_failed = False  # since the last step that worked
        self.stopping = threading.Event()
        self.scheduler = Scheduler(alias)
        every = {
            "heartbeat": intervals.heartbeat,
            "reconcile": intervals.reconcile if reconciler is not None else None,
            "rescue": intervals.rescue,
            "prune": intervals.prune,
            "shelve_history": intervals.shelve,
            "schedule": intervals.schedule,
            "release_flow_blocked": intervals.flow_sweep,
            "watch_pauses": intervals.pause_check,
            "expire": intervals.expire,
            "age_priorities": intervals.aging,
        }
        first_delay = {
            "prune": min(60.0, intervals.heartbeat * 6),
            "shelve_history": min(60.0, intervals.heartbeat * 6),
        }
        self.tasks = [
            Periodic(every[name], getattr(self, name), first_delay=first_delay.get(name, 0.0))
            for name in self.STEPS
        ]
        self.paused: set[tuple[str, str]] | None = None
        self._reconcile = self.tasks[self.STEPS.index("reconcile")]

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                for task in self.tasks:
                    if task.due(now) and not self.stopping.is_set():
                        self._guarded(task, now)
                wait = (
                    min((t.next_run for t in self.tasks if t.interval or t.soon), default=now + 1)
                    - now
                )
                self.stopping.wait(max(0.05, min(wait, 1.0)))
        finally:
            connections.close_all()

    def _guarded(self, task: Periodic, now: float) -> None:
        name = task.action.__name__
        try:
            task.run(now)
        except DatabaseError:
            reset_connection(self.alias)
            self.connection_failed = True
            task.failed(now)
            # During an outage every step fails on every turn: the traceback once, then a
            # line now and then, not a traceback a second from the scheduler.
            if task.failures == 1 or now - task.last_report >= OUTAGE_REPORT_INTERVAL:
                task.last_report = now
                logger.warning(
                    "maintenance step %s failed (%s in a row); will retry",
                    name,
                    task.failures,
                    exc_info=task.failures == 1,
                )
            return
        except Exception:
            logger.exception("unexpected error in maintenance step %s", name)
            return
        if self.connection_failed:
            # Connected again, maybe to a promoted standby that lost the end of jobs this
            # worker ran: reconcile now rather than at its next turn.
            self.connection_failed = False
            if self.reconciler is not None and task is not self._reconcile:
                self._reconcile.run_soon()
        if task.failures:
            logger.info(
                "maintenance step %s works again after %s", name, counted(task.failures, "failure")
            )
            task.failures = 0

    def heartbeat(self) -> None:
        slots = [slot for slot in self.in_flight if not slot.abandoned]
        result = heartbeat(self.alias, self.identity, [slot.fence for slot in slots])
        for slot in slots:
            if slot.fence.job_id in result.cancel_requested:
                slot.ctx.request_cancel()
            elif slot.fence.job_id not in result.alive and slot.state == "handler":
                # Only a handler still running can have lost its job: a slot past its handler
                # may have just recorded its verdict, which also ends the job's 'running'.
                logger.warning(
                    "job %s is no longer held by this worker (rescued elsewhere, or its claim "
                    "lost in a failover?)",
                    slot.fence.job_id,
                )

    def reconcile(self) -> None:
        """Give back the jobs marked running as this worker's that it is not running."""
        if self.reconciler is not None and self.reconciler.run() is None:
            # a claim still on its way to the slots after a while: try again shortly
            self._reconcile.run_soon(RECONCILE_RETRY)

    def rescue(self) -> None:
        reap_stale(self.alias, self.intervals.stale_timeout)
        transitions.release_unpaused(self.alias)

    def expire(self) -> None:
        """End the jobs whose deadline passed before they could start, and wake the parked
        workflows whose time came."""
        expire_overdue(self.alias)
        wake_parked(self.alias)

    def release_flow_blocked(self) -> None:
        release_flow_blocked(self.alias)

    def age_priorities(self) -> None:
        """Raise the priority of the jobs that waited in the aging queues (read from
        ``PQJOBS["PRIORITY_AGING"]`` at each sweep)."""
        age_priorities(self.alias)

    def watch_pauses(self) -> None:
        """Log when a queue or job type this worker serves is paused or resumed (the
        claim itself reads the pauses, so they take effect whether or not this runs)."""
        now = {(p.kind, p.name) for p in flow.paused(self.alias)}
        if self.paused is not None:
            for kind, name in sorted(now - self.paused):
                if self._serves(kind, name):
                    logger.warning("%s %s paused: its jobs wait", kind, printable(name))
            for kind, name in sorted(self.paused - now):
                if self._serves(kind, name):
                    logger.warning("%s %s resumed", kind, printable(name))
        elif served := sorted((kind, name) for kind, name in now if self._serves(kind, name)):
            names = ", ".join(f"{kind} {printable(name)}" for kind, name in served)
            logger.warning("paused at start: %s", names)
        self.paused = now

    def _serves(self, kind: str, name: str) -> bool:
        queues = self.identity.queues
        return kind != "queue" or not queues or name in queues

    def prune(self) -> None:
        prune_finished(self.alias)

    def shelve_history(self) -> None:
        """Move the jobs finished HISTORY_AFTER ago to their history partitions (nothing
        while it is None)."""
        shelve_finished(self.alias)

    def schedule(self) -> None:
        """Sync declared schedules (first time), then enqueue the due ones."""
        self.scheduler.run_pass()
