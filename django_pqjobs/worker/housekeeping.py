"""Keeping the job tables healthy: stale-job rescue and the expiry of jobs past their
deadline (logged), retention pruning (finished jobs and the audit trail), VACUUM where
autovacuum does not run, and priority aging (logged). Workers run these
periodically; the ``reap_stale`` and ``prune_jobs`` commands run them on demand.
"""

from __future__ import annotations

import logging
import time

from django.db import DatabaseError, connections, transaction

from .. import audit, endings, transitions
from ..conf import Aging, conf
from ..notify import notify_queues
from ..printable import counted, printable
from ..sql import queries
from ..statuses import FINISHED_STATUSES
from ..transitions import history

QUERIES = queries("worker_housekeeping")

logger = logging.getLogger("django_pqjobs")

VACUUM_LOCK_KEY = transitions.REAPER_LOCK_KEY + 1  # one vacuuming worker at a time
FLOW_LOCK_KEY = transitions.REAPER_LOCK_KEY + 2  # one flow sweep at a time
AGING_LOCK_KEY = transitions.REAPER_LOCK_KEY + 3  # one priority aging sweep at a time
# batches of transitions.aging.AGING_BATCH per queue and sweep: a backlog bigger than this
# is raised over several sweeps
AGING_MAX_BATCHES = 10
VACUUM_MIN_DEAD = 10_000
RETAINED = tuple(str(status) for status in FINISHED_STATUSES)  # PQJOBS["RETENTION"]'s keys
VACUUM_DEAD_RATIO = 0.1


def expire_overdue(alias: str) -> list[int]:
    """End the jobs past their deadline (a batch), log and announce them (and the dependents
    their expiry cancelled)."""
    expired = transitions.expire_overdue(alias)
    if expired:
        endings.announce_stored(alias, dict.fromkeys(expired, "expired"), dependents_of=expired)
        logger.warning(
            "%s past the deadline before an attempt could start: expired (%s)",
            counted(len(expired), "job"),
            ", ".join(f"#{n}" for n in expired[:10]) + (" …" if len(expired) > 10 else ""),
            extra={"outcome": "expired", "count": len(expired)},
        )
    return expired


def wake_parked(alias: str) -> list[int]:
    """Wake the parked workflows whose time came (a batch): ready, and workers told."""
    woken = transitions.wake_due(alias)
    if woken:
        with connections[alias].cursor() as cursor:
            notify_queues(cursor, [queue for _, queue in woken])
    return [job_id for job_id, _ in woken]


def reap_stale(
    alias: str, stale_after: float, worker_id: str | None = None
) -> list[transitions.Rescued] | None:
    """Rescue stale jobs (or every running job of ``worker_id``) once, log and announce each
    one. None when another worker holds the lock."""
    rescued = transitions.rescue_stale(alias, stale_after, worker_id)
    if rescued:
        endings.announce_stored(
            alias,
            {r.job_id: endings.OUTCOME_OF_STATUS[r.status] for r in rescued},
            dependents_of=[r.job_id for r in rescued if r.status != "ready"],
        )
    for job in rescued or []:
        logger.warning(
            "rescued job %s %s attempt %s from worker %s: now %s%s",
            job.job_id,
            printable(job.job_type),
            job.attempt,
            printable(job.worker_id),
            job.status,
            "" if job.charged else " (it never started: the attempt was given back)",
            extra={
                "job_id": job.job_id,
                "job_type": printable(job.job_type),
                "attempt": job.attempt,
                "outcome": "rescued",
                "status": job.status,
                "worker_id": printable(job.worker_id),
            },
        )
    return rescued


_PRUNE = QUERIES["prune"]
# What the pruned jobs leave behind: the one delete cascade (sql/schema/history.sql).
_FORGET = QUERIES["forget"]
# A finished batch goes once none of its members and callbacks is left and it finished
# longer ago than the longest retention.
_PRUNE_BATCHES = QUERIES["prune_batches"]


def prune(
    alias: str,
    retention: dict[str, float | None],
    batch: int = 5000,
    max_batches: int = 1000,
    dry_run: bool = False,
) -> dict[str, int]:
    """Delete finished jobs older than their status's retention, with their attempt history
    and dependency edges: the history partitions whose whole span is past it are dropped,
    the hot table's jobs deleted in short batches. (A shelved job is kept until its
    partition goes: up to a span past its retention.)

    ``dry_run`` (in a transaction the caller rolls back): each drop is undone at once, so
    that its lock on the job table is not held to the end of that transaction."""
    deleted: dict[str, int] = {}
    for status in RETAINED:
        age = retention.get(status)
        deleted[status] = 0
        if age is None:
            continue
        try:
            # a savepoint inside a caller's transaction (prune_jobs --dry-run): a failed
            # drop must not abort the rest
            with transaction.atomic(using=alias):
                deleted[status] += history.drop_expired(alias, status, age)
                if dry_run:
                    transaction.set_rollback(True, using=alias)
        except DatabaseError as exc:
            # lock_timeout (a long transaction on pqjobs_job: the next prune tries again),
            # or a role not granted pqjobs_history_drop(): the hot table is pruned anyway
            logger.warning(
                "history partitions of %s jobs not dropped: %s", status, printable(str(exc))
            )
        for _ in range(max_batches):
            # (the jobs and what they leave behind go together)
            with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
                cursor.execute(_PRUNE, {"status": status, "age": float(age), "batch": batch})
                pruned = [row[0] for row in cursor.fetchall()]
                if pruned:
                    cursor.execute(_FORGET, [pruned])
                count = len(pruned)
            deleted[status] += count
            if count < batch:
                break
    return deleted


def prune_batches(alias: str, retention: dict[str, float | None]) -> int:
    """Delete finished batches none of whose jobs is left, once they finished longer ago
    than the longest retention (never while some status is kept forever)."""
    ages = [retention.get(status) for status in RETAINED]
    if any(age is None for age in ages):
        return 0
    with connections[alias].cursor() as cursor:
        cursor.execute(_PRUNE_BATCHES, {"age": float(max(a for a in ages if a is not None))})
        return int(cursor.rowcount)


# A sequence whose last job is gone (pruned) starts afresh at its next enqueue. An enqueuer
# holding the row is skipped, and a row one updated meanwhile is kept: the DELETE re-reads
# the row it meets and compares the job it names.
_PRUNE_SEQUENCES = QUERIES["prune_sequences"]


def prune_sequences(alias: str, batch: int = 5000, max_batches: int = 100) -> int:
    """Forget the sequences whose last job is gone (pruned or deleted), in short batches,
    and the edges that job kept as its place in line (``pqjobs_job_forget``)."""
    deleted = 0
    for _ in range(max_batches):
        with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
            cursor.execute(_PRUNE_SEQUENCES, {"batch": batch})
            last = [row[0] for row in cursor.fetchall()]
            if any(job_id is not None for job_id in last):
                cursor.execute(_FORGET, [[job_id for job_id in last if job_id is not None]])
            count = len(last)
        deleted += count
        if count < batch:
            break
    return deleted


def shelved_statuses(retention: dict[str, float | None]) -> list[str]:
    """The finished statuses whose jobs go to history partitions: those kept at least a day
    (a partition holds a day; the others are pruned from the hot table)."""
    return [
        status
        for status in RETAINED
        if (kept := retention.get(status)) is None or kept >= history.SHORTEST_SHELVED
    ]


def shelve_finished(alias: str) -> dict[str, int]:
    """Move the jobs finished ``PQJOBS['HISTORY_AFTER']`` ago from the hot table to their
    history partitions (made as needed, and a day ahead), for the statuses
    ``PQJOBS['RETENTION']`` keeps at least a day. Returns the jobs moved per status;
    nothing while HISTORY_AFTER is None.

    The partitions' spans come from ``PQJOBS['RETENTION']`` alone, whoever moves the jobs
    (the workers' maintenance, ``prune_jobs`` with other retentions on its command line):
    a status's history is cut in the same spans however it got there."""
    after = conf.HISTORY_AFTER
    if after is None:
        return {}
    retention = conf.RETENTION
    moved = {
        status: history.shelve(alias, status, float(after), retention.get(status))
        for status in shelved_statuses(retention)
    }
    if any(moved.values()):
        logger.info("moved finished jobs to history partitions: %s", moved)
    return moved


def prune_finished(alias: str) -> dict[str, int]:
    """Prune by ``PQJOBS['RETENTION']`` and the audit trail by ``PQJOBS['AUDIT_RETENTION']``,
    then vacuum if autovacuum is off for the tables. Returns the jobs deleted per status."""
    deleted = prune(alias, conf.RETENTION)
    if any(deleted.values()):
        logger.info("pruned finished jobs: %s", deleted)
    batches = prune_batches(alias, conf.RETENTION)
    if batches:
        logger.info("pruned %d finished batches", batches)
    sequences = prune_sequences(alias)
    if sequences:
        logger.info("forgot %d sequences whose last job is gone", sequences)
    actions = audit.prune(alias, conf.AUDIT_RETENTION)
    if actions:
        logger.info("pruned %d operator actions from the audit trail", actions)
    started = time.monotonic()
    if vacuum_if_needed(alias):
        logger.info(
            "vacuumed the job tables in %.1f s (autovacuum is off for them)",
            time.monotonic() - started,
        )
    return deleted


_JOB_TABLE_HEALTH = QUERIES["job_table_health"]


def vacuum_if_needed(alias: str) -> bool:
    """Vacuum the job tables' hot partitions when autovacuum is off for them and dead rows
    piled up (history partitions are only ever added to, and dropped whole).

    Every job leaves dead row versions behind (claim, completion, pruning); without
    autovacuum nothing reclaims them and the table and its indexes grow for ever. Returns
    True if it vacuumed. Must run outside a transaction (VACUUM cannot run inside one).
    """
    with connections[alias].cursor() as cursor:
        cursor.execute(_JOB_TABLE_HEALTH)
        row = cursor.fetchone()
        if row is None:
            return False
        dead, live, autovacuum = int(row[0]), int(row[1]), bool(row[2])
        if autovacuum or dead < max(VACUUM_MIN_DEAD, VACUUM_DEAD_RATIO * live):
            return False
        cursor.execute(QUERIES["vacuum_lock"], [VACUUM_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return False
        try:
            cursor.execute(QUERIES["vacuum"])
        finally:
            cursor.execute(QUERIES["vacuum_unlock"], [VACUUM_LOCK_KEY])
    return True


# Whether any job waits for a rate window (pqjobs_job_blocked_rate holds exactly those and
# the jobs of rate-limited keys held otherwise), and whether any waits for a slot of its
# concurrency key (pqjobs_job_blocked_key): every worker asks twice a second, and each
# release is a transaction of its own statements, run only for what waits.
_ANY_FLOW_BLOCKED = QUERIES["any_flow_blocked"]


def release_flow_blocked(alias: str) -> int | None:
    """Release the jobs rate limits held back, as far as their windows have room now, and
    the jobs held by a concurrency limit whose key has room (a release the database
    missed: see :func:`~django_pqjobs.transitions.promote_limit_blocked`).

    One worker at a time does it (None when another holds the lock).
    """
    with connections[alias].cursor() as cursor:
        cursor.execute(_ANY_FLOW_BLOCKED)
        rate, limit = cursor.fetchone()
    if not (rate or limit):
        return 0
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(QUERIES["flow_lock"], [FLOW_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        released = transitions.promote_rate_blocked(alias) if rate else 0
        return released + (transitions.promote_limit_blocked(alias) if limit else 0)


def age_priorities(alias: str, aging: dict[str, Aging] | None = None) -> dict[str, int] | None:
    """Raise by 1 the priority of the due jobs that waited long enough in each aging queue
    (``aging``, by default ``PQJOBS["PRIORITY_AGING"]``), and log how many (one line per
    sweep, when any). Returns how many per queue that had some.

    One worker at a time does it (None when another holds the lock), in one transaction:
    its ``now()`` is the same for every batch, so no job is raised twice in a sweep.
    """
    rules = conf.PRIORITY_AGING if aging is None else aging
    if not rules:
        return {}
    raised: dict[str, int] = {}
    batch = transitions.aging.AGING_BATCH
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(QUERIES["aging_lock"], [AGING_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        for queue, rule in rules.items():
            for _ in range(AGING_MAX_BATCHES):
                count = transitions.raise_priority(alias, queue, rule.every, rule.up_to, batch)
                if count:
                    raised[queue] = raised.get(queue, 0) + count
                if count < batch:
                    break
    if raised:
        logger.info(
            "priority aging raised by 1 the priority of %s",
            ", ".join(f"{counted(n, 'job')} of queue {printable(q)}" for q, n in raised.items()),
            extra={"count": sum(raised.values())},
        )
    return raised
