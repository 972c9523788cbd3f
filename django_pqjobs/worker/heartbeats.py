"""Heartbeats: the worker's row in ``pqjobs_worker`` and the ``heartbeat_at`` of its jobs.

A running job whose heartbeat stops is rescued by another worker after the stale timeout
(``transitions.rescue_stale``). The heartbeat also brings back which of the worker's jobs
an operator asked to cancel.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from django.db import connections

from ..sql import queries
from ..transitions import Fence

QUERIES = queries("worker_heartbeats")

_HEARTBEAT = QUERIES["heartbeat"]

_WORKER_UPSERT = QUERIES["worker_upsert"]


@dataclass(frozen=True)
class WorkerIdentity:
    """What a worker says about itself in ``pqjobs_worker`` (shown on the dashboard)."""

    worker_id: str
    hostname: str
    pid: int
    queues: Sequence[str] | None
    concurrency: int
    # Whether it LISTENs at all. Its listener keeps ``pqjobs_worker.listening`` exact; a row
    # (re)inserted by a heartbeat starts from this, erring towards "notify me".
    listens: bool = False
    # The bounds of its live concurrency (see capacity.py); None: the same as concurrency.
    started_concurrency: int | None = None
    max_concurrency: int | None = None


@dataclass(frozen=True)
class HeartbeatResult:
    alive: set[int]
    cancel_requested: set[int]


def heartbeat(alias: str, worker: WorkerIdentity, fences: Sequence[Fence]) -> HeartbeatResult:
    """Record that the worker and its running attempts are alive.

    Returns which of ``fences`` are still ours and which have a cancel request.
    """
    with connections[alias].cursor() as cursor:
        cursor.execute(
            _WORKER_UPSERT,
            [
                worker.worker_id,
                worker.hostname,
                worker.pid,
                json.dumps(list(worker.queues) if worker.queues else None),
                worker.concurrency,
                worker.listens,
                worker.started_concurrency or worker.concurrency,
                worker.max_concurrency or worker.concurrency,
            ],
        )
        if not fences:
            return HeartbeatResult(set(), set())
        cursor.execute(
            _HEARTBEAT,
            [[f.job_id for f in fences], [f.attempt for f in fences], worker.worker_id],
        )
        rows = cursor.fetchall()
    return HeartbeatResult({int(r[0]) for r in rows}, {int(r[0]) for r in rows if r[1]})


def unregister_worker(alias: str, worker_id: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute(QUERIES["unregister"], [worker_id])
