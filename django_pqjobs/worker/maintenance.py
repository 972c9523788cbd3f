"""Work beside the executors: heartbeats, stale-job rescue, retention pruning, schedules,
timeouts."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from ..conf import conf
from ..models import AttemptOutcome
from ..schedules.scheduler import Scheduler
from . import queries
from .db import reset_connection
from .executor import Slot

if TYPE_CHECKING:
    from .worker import Worker

logger = logging.getLogger("django_pqjobs")

WATCHDOG_TICK = 0.05


def reap_stale(alias: str, stale_after: float) -> list[queries.Rescued] | None:
    """Rescue stale jobs once and log each one. None when another worker holds the lock."""
    rescued = queries.rescue_stale(alias, stale_after)
    for job in rescued or []:
        logger.warning(
            "rescued job %s %s attempt %s from worker %s: now %s",
            job.job_id,
            job.job_type,
            job.attempt,
            job.worker_id,
            job.status,
        )
    return rescued


def prune_finished(alias: str) -> dict[str, int]:
    deleted = queries.prune(alias, conf.RETENTION)
    if any(deleted.values()):
        logger.info("pruned finished jobs: %s", deleted)
    started = time.monotonic()
    if queries.vacuum_if_needed(alias):
        logger.info(
            "vacuumed the job tables in %.1f s (autovacuum is off for them)",
            time.monotonic() - started,
        )
    return deleted


class Periodic:
    """Runs ``action`` every ``interval`` seconds; the first run is after ``first_delay``."""

    def __init__(
        self, interval: float | None, action: Callable[[], object], first_delay: float = 0.0
    ) -> None:
        self.interval = interval
        self.action = action
        self.next_run = time.monotonic() + first_delay

    def due(self, now: float) -> bool:
        return self.interval is not None and now >= self.next_run

    def run(self, now: float) -> None:
        assert self.interval is not None
        self.next_run = now + self.interval
        self.action()


class Maintenance(threading.Thread):
    """Heartbeats, rescue and pruning for one worker; survives database outages."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name="pqjobs-maintenance", daemon=True)
        self.worker = worker
        self.stopping = threading.Event()
        heartbeat = worker.heartbeat_interval
        self.tasks = [
            Periodic(heartbeat, self.heartbeat),
            Periodic(worker.reap_interval, self.rescue),
            Periodic(conf.PRUNE_INTERVAL, self.prune, first_delay=min(60.0, heartbeat * 6)),
            Periodic(conf.SCHEDULER_INTERVAL, self.schedule),
        ]
        self.scheduler = Scheduler(worker.alias)

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                now = time.monotonic()
                for task in self.tasks:
                    if task.due(now) and not self.stopping.is_set():
                        self._guarded(task, now)
                wait = min((t.next_run for t in self.tasks if t.interval), default=now + 1) - now
                self.stopping.wait(max(0.05, min(wait, 1.0)))
        finally:
            connections.close_all()

    def _guarded(self, task: Periodic, now: float) -> None:
        try:
            task.run(now)
        except DatabaseError:
            reset_connection(self.worker.alias)
            logger.warning(
                "maintenance step %s failed; will retry", task.action.__name__, exc_info=True
            )
        except Exception:
            logger.exception("unexpected error in maintenance step %s", task.action.__name__)

    def heartbeat(self) -> None:
        worker = self.worker
        slots = worker.running_slots()
        claims = [s.claimed for s in slots if not s.abandoned]
        result = queries.heartbeat(
            worker.alias,
            worker.worker_id,
            claims,
            hostname=worker.hostname,
            pid=worker.pid,
            queues=worker.queues,
            concurrency=worker.concurrency,
        )
        for slot in slots:
            if slot.abandoned:
                continue
            if slot.claimed.job_id in result.cancel_requested:
                slot.ctx._cancel_requested = True
            elif slot.claimed.job_id not in result.alive and slot.state == "handler":
                # Only a handler still running can have lost its job: a slot past its handler
                # may have just recorded its outcome, which also ends the job's 'running'.
                logger.warning(
                    "job %s is no longer held by this worker (rescued elsewhere?)",
                    slot.claimed.job_id,
                )

    def rescue(self) -> None:
        reap_stale(self.worker.alias, self.worker.stale_timeout)

    def prune(self) -> None:
        prune_finished(self.worker.alias)

    def schedule(self) -> None:
        """Sync declared schedules (first time), then enqueue the due ones."""
        self.scheduler.run_pass()


class Watchdog(threading.Thread):
    """Enforces per-job timeouts: interrupt at the deadline, abandon after the grace period."""

    def __init__(self, worker: Worker) -> None:
        super().__init__(name="pqjobs-watchdog", daemon=True)
        self.worker = worker
        self.stopping = threading.Event()
        self.grace = conf.TIMEOUT_GRACE

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        try:
            while not self.stopping.wait(WATCHDOG_TICK):
                self.check(time.monotonic())
        finally:
            connections.close_all()

    def check(self, now: float) -> None:
        for slot in self.worker.running_slots():
            if slot.deadline is None or slot.abandoned or slot.isolated or slot.state != "handler":
                continue
            if slot.interrupted_at is None and now >= slot.deadline:
                if slot.interrupt():
                    logger.warning(
                        "job %s %s passed its timeout of %s s: interrupting",
                        slot.job.id,
                        slot.job.job_type,
                        slot.job.timeout_seconds,
                    )
            elif slot.interrupted_at is not None and now >= slot.interrupted_at + self.grace:
                self.abandon(slot)

    def abandon(self, slot: Slot) -> None:
        """The handler ignored the interrupt (blocked in C): give up on its thread."""
        with slot.lock:
            if slot.state != "handler" or slot.abandoned:
                return
            slot.abandoned = True
        job = slot.job
        logger.error(
            "job %s %s did not stop within %s s of its timeout (blocked outside "
            "Python?): abandoning its thread and starting a replacement",
            job.id,
            job.job_type,
            self.grace,
        )
        from ..registry import registry
        from .executor import retry_delay

        try:
            queries.end_attempt(
                self.worker.alias,
                slot.claimed,
                outcome=AttemptOutcome.TIMEOUT,
                error_type="JobTimeout",
                error=(
                    f"job ran past its timeout of {job.timeout_seconds} s and did not stop "
                    f"within {self.grace} s of being interrupted; its thread was abandoned"
                ),
                duration_ms=int((time.monotonic() - slot.started) * 1000),
                delay=retry_delay(registry.get(job.job_type), job.attempts),
            )
        except DatabaseError:
            reset_connection(self.worker.alias)
            logger.warning(
                "could not record the timeout of job %s; it will be rescued", job.id, exc_info=True
            )
        self.worker.replace_executor(slot)
