"""Fair claiming for operators: the weights of fair keys, and the keys with the most work.

Jobs of a type declared with ``@job(fair_key="tenant:{tenant_id}")`` (or enqueued with
``fair_key=``) are shared out by key: among due jobs of equal priority, workers take keys
in turns (``sql/schema/fairness.sql``). A key's weight is how many turns it takes for each
turn of a key weighing 1: a row of ``pqjobs_fair_weight`` set by :func:`set_fair_weight`
(``manage.py set_fair_weight``, the admin's **Fair key weights**), 1 without one. A weight
is read when a job is enqueued, so a change applies to the jobs enqueued after it.

:func:`fair_keys` reads which keys have the most jobs waiting, for the admin, the metrics
and ``jobs_health``; like the rest of the observability it may read a replica
(``PQJOBS["READ_DATABASE"]``, which the admin and the metrics pass).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import connections, transaction

from . import audit, monitoring, options
from .conf import conf
from .keys import flow_key
from .options import FAIR_WEIGHT_MAX
from .sql import queries
from .statuses import AuditAction

QUERIES = queries("fairness")

SHOWN_KEYS = 10  # the admin's and the metrics' top keys
KEYS_MAX = 1000  # the most fair_keys() reads at once


def fair_weight(value: object, what: str = "weight") -> int:
    """A fair key's weight: a whole number from 1 to ``FAIR_WEIGHT_MAX`` (1000); bools are
    refused (``True == 1`` in Python). ValueError naming ``what`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(
            f"{what} must be a whole number from 1 to {FAIR_WEIGHT_MAX}, got {value!r:.60} "
            f"(a {type(value).__name__})"
        )
    if not 1 <= value <= FAIR_WEIGHT_MAX:
        raise ValueError(f"{what} must be from 1 to {FAIR_WEIGHT_MAX}, got {value}")
    return int(value)


def fair_key(value: object, what: str = "fair key") -> str:
    """A fair key as jobs carry it: 1-255 characters, no control characters (the rules of
    every flow-control key, ``keys.flow_key``)."""
    key = flow_key(value, what)
    if key is None:
        raise ValueError(f"{what} must be a string of 1-255 characters, got None")
    return key


_SET = QUERIES["set_weight"]
_CLEAR = QUERIES["clear_weight"]
_WEIGHTS = QUERIES["weights"]


def set_fair_weight(
    key: str, weight: int | None, *, by: str | None = None, using: str | None = None
) -> None:
    """Give the fair key ``key`` the weight ``weight`` (1-1000): among due jobs of equal
    priority, its jobs take ``weight`` turns for each turn of a key weighing 1. ``None``
    removes the key's row: it weighs 1 again.

    The weight applies to the key's jobs enqueued after the change (each job's place in
    line is given when it is enqueued); jobs already waiting keep theirs. ``key`` is the
    key as jobs carry it (``"tenant:7"`` for ``fair_key="tenant:{tenant_id}"`` and a
    payload ``{"tenant_id": 7}``). With ``by`` (who, 1-150 characters), the change is
    recorded in the audit trail (action ``fair_weight``) in the same transaction.

    Raises ``ValueError`` (naming the argument) for a key that is not 1-255 characters
    without control characters, or a weight that is not a whole number from 1 to 1000.
    """
    key = fair_key(key, "key")
    if weight is not None:
        weight = fair_weight(weight)
    actor = options.actor(by) if by is not None else None
    alias = using or conf.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        if weight is None:
            cursor.execute(_CLEAR, [key])
            detail = f"fair key {key}: cleared, weight 1"
        else:
            cursor.execute(_SET, [key, weight, actor or ""])
            detail = f"fair key {key}: weight {weight}"
        if actor is not None:
            limit = options.NAME_MAX_LENGTH  # the audit trail's target; the detail has it all
            target = key if len(key) <= limit else key[: limit - 1] + "…"
            audit.record(alias, AuditAction.FAIR_WEIGHT, actor, target=target, detail=detail)


@dataclass(frozen=True)
class Weight:
    """A weight set (a row of ``pqjobs_fair_weight``, model ``FairWeight``)."""

    key: str
    weight: int
    set_at: datetime
    set_by: str


def weights(using: str | None = None) -> list[Weight]:
    """Every weight set, by key (keys without a row weigh 1)."""
    with connections[using or conf.DATABASE].cursor() as cursor:
        cursor.execute(_WEIGHTS)
        return [Weight(key, int(weight), at, by) for key, weight, at, by in cursor.fetchall()]


@dataclass(frozen=True)
class FairKey:
    """A fair key's jobs now."""

    key: str
    waiting: int  # ready (due or not) and blocked
    running: int
    # seconds its oldest due ready job has waited since it was due; None: none is due
    oldest_wait: float | None
    weight: int  # 1 without a row of pqjobs_fair_weight


# One arm per status, each read through its partial index (the ready jobs in two halves:
# those without a turn through pqjobs_job_claim, led by "fair_turn IS NULL", those with
# one through pqjobs_job_fair_claim; pqjobs_job_blocked_key; pqjobs_job_running):
# "status IN (...)" matches no index's predicate and reads the whole table. So the cost
# grows with the jobs waiting and running, never with the finished history. Ages are
# differences of epochs (a run_after written as '-infinity' is an infinite wait, not an
# error).
_FAIR_KEYS = QUERIES["fair_keys"]


def fair_keys(limit: int = SHOWN_KEYS, using: str | None = None) -> list[FairKey]:
    """The ``limit`` fair keys with the most jobs waiting (ready or blocked), the most first:
    each with its jobs waiting and running, how long its oldest due ready job has waited,
    and its weight. Keys with jobs running but none waiting come after (there are fewer
    than ``limit`` keys with jobs waiting).

    One statement, read from ``using`` (default ``PQJOBS["DATABASE"]``; the admin and the
    metrics pass ``PQJOBS["READ_DATABASE"]``) under the monitoring reads' statement
    timeout. It reads the keyed jobs waiting and running
    through their partial indexes, not the finished history. ``limit`` is 1-1000.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= KEYS_MAX:
        raise ValueError(f"limit must be a whole number from 1 to {KEYS_MAX}, got {limit!r:.60}")
    rows = monitoring.read(using, _FAIR_KEYS, [limit])
    return [
        FairKey(
            key=row[0],
            waiting=int(row[1]),
            running=int(row[2]),
            oldest_wait=None if row[3] is None else max(0.0, float(row[3])),
            weight=int(row[4]),
        )
        for row in rows
    ]


# The keyed ready jobs due for longer than a threshold, through the two halves of the ready
# jobs' indexes (see _FAIR_KEYS).
_WAITING_LONGEST = QUERIES["waiting_longest"]


def waiting_longest(
    longer_than: float,
    *,
    queues: Sequence[str] | None = None,
    limit: int = 3,
    using: str | None = None,
) -> list[tuple[str, float]]:
    """The fair keys (of jobs of ``queues``, default all) whose oldest due ready job has
    waited more than ``longer_than`` seconds, the longest first: ``(key, seconds)``, at
    most ``limit``. What ``jobs_health`` names when the queue lags."""
    sql = _WAITING_LONGEST.replace(
        "{queue_filter}", "AND queue = ANY(%(queues)s)" if queues else ""
    )
    params = {"seconds": float(longer_than), "queues": list(queues or ()), "limit": limit}
    rows = monitoring.read(using, sql, params)
    return [(str(key), max(0.0, float(seconds))) for key, seconds in rows]
