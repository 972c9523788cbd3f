"""The reconcile: a worker gives back the jobs marked ``running`` as its own that it is not
running.

They come from a failover to an asynchronous standby (the primary crashed before it sent
the end of an attempt, or a claim, the worker went on from), from a crash that lost commits
(``synchronous_commit = off``), or from a row changed behind the worker's back. Their
heartbeat is never written again, but nothing else would free them before the stale
timeout (20 minutes by default), and the rescue would then blame a worker that is alive.

The worker's slots say what it runs. The danger is a job claimed by a claim statement that
has committed but whose jobs are not in the slots yet: the claim loop holds a lock from
before each claim until its jobs are in the slots (``barrier``), and the reconcile reads the
database's claims first, then waits for that lock, then reads the slots: every claim the
database showed is registered by then. The release is fenced on each claim (its attempt
number and its time), so an attempt claimed again meanwhile is left alone.

Only the claims since this process's first one count: a process restarted under the same
worker id (``run_jobs --processes`` restarts a dead one as ``ID-1`` again) leaves the jobs
of the one before it to the stale rescue, which charges the attempts whose handler started
(a handler that kills its process must not run for ever, uncharged).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

from .. import endings, transitions
from ..printable import printable
from .slots import InFlight

logger = logging.getLogger("django_pqjobs")

# The first claim's time comes back as a float of epoch seconds (a quarter of a microsecond
# off): the claims of this process start no earlier than this before it.
SINCE_MARGIN = 0.001
# How long the reconcile waits for a claim on its way to be registered; when a claim takes
# longer (the database is slow to answer it), this round gives up and the next one tries.
BARRIER_TIMEOUT = 5.0

NOTE = "released: worker {worker} was not running it (lost after a failover or reconnect)"


class Reconciler:
    """Compares what the database says ``worker_id`` runs with its slots (``in_flight``)
    and gives back the difference (:func:`~django_pqjobs.transitions.release_unheld`).

    ``barrier(timeout)`` returns once every claim that has committed is in the slots
    (False: it could not tell within ``timeout``); ``on_released`` is told the attempts
    given back.
    """

    def __init__(
        self,
        alias: str,
        worker_id: str,
        in_flight: InFlight,
        barrier: Callable[[float], bool],
        on_released: Callable[[list[transitions.Unheld]], None] | None = None,
    ) -> None:
        self.alias = alias
        self.worker_id = worker_id
        self.in_flight = in_flight
        self.barrier = barrier
        self.on_released = on_released
        self.since: float | None = None  # this process's first claim, in epoch seconds

    def claimed(self, claimed_at: datetime) -> None:
        """A claim of this process was registered, made at ``claimed_at`` (the database's
        clock)."""
        if self.since is None:
            if timezone.is_naive(claimed_at):  # USE_TZ = False
                claimed_at = timezone.make_aware(claimed_at)
            self.since = claimed_at.timestamp() - SINCE_MARGIN

    def run(self) -> list[transitions.Unheld] | None:
        """One reconcile. Returns the attempts given back (None: a claim was still on its
        way after ``BARRIER_TIMEOUT``; nothing was done)."""
        if self.since is None:
            return []  # this process has claimed nothing yet
        claims = transitions.claims_of(self.alias, self.worker_id, self.since)
        if not claims:
            return []
        if not self.barrier(BARRIER_TIMEOUT):
            return None
        held = {(slot.fence.job_id, slot.fence.attempt) for slot in self.in_flight.snapshot()}
        unheld = [c for c in claims if (c.job_id, c.attempt) not in held]
        if not unheld:
            return []
        note = NOTE.format(worker=printable(self.worker_id))
        released = transitions.release_unheld(self.alias, self.worker_id, unheld, note)
        if not released:
            return released
        for job in released:
            logger.warning(
                "released job %s %s attempt %s: this worker (%s) was not running it (its end "
                "was lost, after a failover or reconnect); now %s, the attempt does not count",
                job.job_id,
                printable(job.job_type),
                job.attempt,
                printable(self.worker_id),
                job.status,
                extra={
                    "job_id": job.job_id,
                    "job_type": printable(job.job_type),
                    "queue": printable(job.queue),
                    "attempt": job.attempt,
                    "outcome": "released",
                    "status": job.status,
                    "worker_id": printable(self.worker_id),
                },
            )
        endings.announce_stored(
            self.alias,
            {job.job_id: "released" if job.status == "ready" else "cancelled" for job in released},
            dependents_of=[job.job_id for job in released if job.status != "ready"],
        )
        if self.on_released is not None:
            self.on_released(released)
        return released
