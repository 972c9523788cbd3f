"""Operator actions on jobs, for code and for the admin: the same transitions either way.

Each action is a conditional statement of the state machine (``transitions/``): a job in
a status the action does not apply to is left alone and missing from the result. Given
``by`` (who acts: a username, a service name), the action is recorded in the audit trail
(``audit.py``) in the same transaction; the admin always gives it.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import connections, transaction

from . import audit, endings, options, transitions
from .audit import AuditAction, JobAction
from .clock import database_now
from .conf import conf
from .notify import notify_queues
from .statuses import FINISHED_STATUSES
from .transitions import Cancelled, Deleted, Fence, MadeDue, Requeued


def _actor(by: str | None) -> str | None:
    return None if by is None else options.actor(by)


def retry_jobs(
    job_ids: Sequence[int], *, by: str | None = None, using: str | None = None
) -> list[Requeued]:
    """Put ``failed`` / ``cancelled`` / ``expired`` jobs back to ``ready`` now (without a
    deadline); other jobs are skipped, and so is a job whose ``dedupe_key`` an active
    (ready, blocked, running) job of its type holds (of several retried with one key, only
    the newest goes back).

    Attempt numbers go on: a job that failed after 5 of 5 attempts continues with attempt 6
    and may make 5 more (as many as its last round had); its backoff starts over from the
    first step. Its failure history is kept.
    """
    alias = using or conf.DATABASE
    actor = _actor(by)
    with transaction.atomic(using=alias):
        done = transitions.requeue_many(alias, job_ids)
        if actor is not None:
            audit.record_jobs(
                alias,
                AuditAction.RETRY,
                actor,
                [
                    JobAction(
                        r.job_id,
                        None,
                        f"{r.was} → ready; next attempt {r.attempts + 1} of {r.max_attempts}",
                    )
                    for r in done
                ],
            )
    return done


def retry_job(job_id: int, *, by: str | None = None, using: str | None = None) -> bool:
    """Put a ``failed`` or ``cancelled`` job back to ``ready`` now (see :func:`retry_jobs`).

    Returns False when the job is in another status. With ``by``, the retry is recorded in
    the audit trail under that name.
    """
    return bool(retry_jobs([job_id], by=by, using=using))


def skip_jobs(
    job_ids: Sequence[int], *, by: str | None = None, using: str | None = None
) -> list[int]:
    """Set ``failed`` jobs aside (they become ``cancelled``, their error kept) so that what
    halts on them goes on: the rest of a halted sequence, or dependents whose policy is
    ``"halt"``. Jobs in other statuses are skipped. Returns the ids skipped over."""
    alias = using or conf.DATABASE
    actor = _actor(by)
    with transaction.atomic(using=alias):
        skipped = transitions.skip_many(alias, job_ids)
        endings.announce_after_commit(
            alias, dict.fromkeys(skipped, "cancelled"), dependents_of=skipped
        )
        if actor is not None:
            audit.record_jobs(
                alias,
                AuditAction.SKIP,
                actor,
                [
                    JobAction(i, None, "failed → cancelled; what waited on it goes on")
                    for i in skipped
                ],
            )
    return skipped


def end_waits(
    job_ids: Sequence[int], *, by: str | None = None, using: str | None = None
) -> list[int]:
    """End the durable waits of parked workflows now (``ctx.sleep`` is over; a
    ``ctx.wait_for_signal`` times out): they are ready, due now. Jobs not parked are
    skipped. Returns the ids woken."""
    alias = using or conf.DATABASE
    actor = _actor(by)
    woken: list[tuple[int, str, list[tuple[str, str]]]] = []
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        for job_id in job_ids:
            ended = transitions.end_wait(cursor, job_id)
            if ended is not None:
                woken.append((job_id, ended[0], ended[1]))
        notify_queues(cursor, [queue for _, queue, _ in woken])
        if actor is not None:
            audit.record_jobs(
                alias,
                AuditAction.END_WAIT,
                actor,
                [
                    JobAction(job_id, None, "waiting → ready; ended: " + _waits(waits))
                    for job_id, _, waits in woken
                ],
            )
    return [job_id for job_id, _, _ in woken]


def _waits(waits: Sequence[tuple[str, str]]) -> str:
    shown = [
        f"{'sleep' if kind == 'sleep' else 'wait for signal'} {name!r}" for name, kind in waits
    ]
    return ", ".join(shown) or "its wait"


def cancel_jobs(
    job_ids: Sequence[int], *, by: str | None = None, using: str | None = None
) -> Cancelled:
    """Cancel ready or blocked jobs at once; ask running ones to stop (their handler sees
    ``ctx.cancelled`` within a heartbeat, an isolated child is killed). Finished jobs, and
    running ones already asked, are skipped."""
    alias = using or conf.DATABASE
    actor = _actor(by)
    with transaction.atomic(using=alias):
        result = transitions.cancel_many(alias, job_ids)
        endings.announce_after_commit(
            alias, dict.fromkeys(result.cancelled, "cancelled"), dependents_of=result.cancelled
        )
        if actor is not None:
            changed = [JobAction(i, None, "cancelled") for i in result.cancelled]
            changed += [
                JobAction(i, None, "cancel requested (it was running)")
                for i in result.cancel_requested
            ]
            audit.record_jobs(alias, AuditAction.CANCEL, actor, changed)
    return result


def cancel_job(job_id: int, *, by: str | None = None, using: str | None = None) -> str | None:
    """Cancel a job: a ready job becomes ``cancelled`` at once; a running job gets a cancel
    request its handler sees as ``ctx.cancelled`` (within one heartbeat).

    Returns ``"cancelled"``, ``"cancel_requested"``, or None if the job is already finished
    or does not exist. With ``by``, the cancel is recorded in the audit trail.
    """
    result = cancel_jobs([job_id], by=by, using=using)
    if result.cancelled:
        return "cancelled"
    return "cancel_requested" if result.cancel_requested else None


def run_jobs_now(
    job_ids: Sequence[int], *, by: str | None = None, using: str | None = None
) -> list[MadeDue]:
    """Make ready jobs the next ones claimed among the jobs of their priority, whether they
    were delayed or already due (higher priorities still go first). Other jobs, blocked ones
    included, are skipped."""
    alias = using or conf.DATABASE
    actor = _actor(by)
    with transaction.atomic(using=alias):
        done = transitions.run_now_many(alias, job_ids)
        if actor is not None:
            audit.record_jobs(
                alias,
                AuditAction.RUN_NOW,
                actor,
                [
                    JobAction(
                        r.job_id,
                        None,
                        ("was delayed; " if r.was_delayed else "")
                        + "now first of its priority in the claim order",
                    )
                    for r in done
                ],
            )
    return done


def release_job(
    job_id: int,
    *,
    worker_id: str,
    attempt: int,
    by: str | None = None,
    using: str | None = None,
) -> str | None:
    """Take a stuck ``running`` job back from its worker at once: ``ready`` again (or
    ``cancelled`` if a cancel was requested), without waiting for the stale timeout.

    Only the attempt named by ``worker_id`` and ``attempt`` is released (it is what the
    operator saw); if the job has moved on meanwhile, nothing changes and None is returned.
    The attempt is recorded as released and given back (``max_attempts + 1``); its number is
    not reused, so whatever the old worker records later is ignored. The handler may still
    be running there: release only a job whose worker is stuck or gone.
    """
    alias = using or conf.DATABASE
    actor = _actor(by)
    note = (
        f"released by {actor or 'an operator'} while running on worker {worker_id}; "
        "the attempt was given back and whatever that worker records is ignored"
    )
    with transaction.atomic(using=alias):
        status = transitions.force_release(alias, Fence(job_id, worker_id, attempt), note)
        if status is not None:
            endings.announce_after_commit(
                alias,
                {job_id: "released" if status == "ready" else "cancelled"},
                dependents_of=[job_id] if status == "cancelled" else [],
            )
        if status is not None and actor is not None:
            audit.record_jobs(
                alias,
                AuditAction.RELEASE,
                actor,
                [JobAction(job_id, None, f"attempt {attempt} on {worker_id} released: {status}")],
            )
    return status


def delete_jobs(
    job_ids: Sequence[int], *, by: str | None = None, using: str | None = None
) -> list[Deleted]:
    """Delete jobs and their attempt history, except running ones (cancel or release those
    first). The audit trail keeps who deleted which job."""
    alias = using or conf.DATABASE
    actor = _actor(by)
    with transaction.atomic(using=alias):
        deleted = transitions.delete_unless_running(alias, job_ids)
        active = [d.job_id for d in deleted if d.was not in FINISHED_STATUSES]
        if active:  # their dependents are cancelled (or released) at the commit
            endings.announce_after_commit(alias, {}, dependents_of=active, at=database_now(alias))
        if actor is not None:
            audit.record_jobs(
                alias,
                AuditAction.DELETE,
                actor,
                [JobAction(d.job_id, d.job_type, f"deleted (was {d.was})") for d in deleted],
            )
    return deleted
