"""The end of an attempt: running → done | ready | failed | cancelled, the attempt given back
(release; release_unheld, by a worker that is not running it), its progress and start, and
the rescue of attempts whose worker is gone. Every statement here is fenced on the attempt
(``Fence``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction

from ..notify import notify_queues
from ..serialization import storable_error, storable_text
from ..sql import queries
from ..statuses import AfterFailure, FailureKind
from .cursors import batch_cursor, cursor_of
from .fence import Fence

QUERIES = queries("attempts")

REAPER_LOCK_KEY = 0x70716A6F6273  # "pqjobs": one rescuer at a time across all workers
# How many times a rescue gives back an attempt that never started, per job; after that
# such attempts count like any other.
GIVE_BACK_LIMIT = 3


# --- running → done ----------------------------------------------------------------------


@dataclass(frozen=True)
class Completion:
    """A successful attempt waiting to be recorded (JSON already checked by the worker)."""

    fence: Fence
    result_json: str | None
    duration_ms: int
    progress_json: str | None = None


def _done_entry(c: Completion) -> str:
    """One attempt in pqjobs_complete()'s argument: [job id, attempt, duration in ms, result,
    progress, tid]. The result and progress (JSON text the worker has checked) travel as JSON
    strings, so that whatever they hold, they cannot change the document around them; a tid
    is "(page,item)"."""
    # a tid is "(page,item)" as PostgreSQL wrote it: nothing in it to escape
    tid = "null" if c.fence.tid is None else '"' + c.fence.tid + '"'
    return (
        f"[{c.fence.job_id},{c.fence.attempt},{c.duration_ms},{_json_string(c.result_json)},"
        f"{_json_string(c.progress_json)},{tid}]"
    )


def _json_string(text: str | None) -> str:
    return "null" if text is None else json.dumps(text)


def complete_many(alias: str, completions: Sequence[Completion]) -> set[int]:
    """running → done for many attempts of one worker in one statement.

    Returns the ids recorded; an attempt missing from it was no longer ours (fenced off).
    """
    if not completions:
        return set()
    worker_ids = {c.fence.worker_id for c in completions}
    if len(worker_ids) != 1:
        raise ValueError(f"complete_many takes one worker's attempts, got {sorted(worker_ids)}")
    done = ",".join(_done_entry(c) for c in completions)
    with batch_cursor(alias) as cursor:
        cursor.execute(QUERIES["complete"], [worker_ids.pop(), f"[{done}]"])
        return {int(row[0]) for row in cursor.fetchall()}


def complete(alias: str, completion: Completion) -> bool:
    """running → done for one attempt. False if it was no longer ours (fenced off)."""
    return completion.fence.job_id in complete_many(alias, [completion])


# --- running → ready | failed | cancelled ------------------------------------------------


def end_attempt(
    alias: str,
    fence: Fence,
    *,
    failure: FailureKind | str,
    error_type: str,
    error: str,
    duration_ms: int | None,
    delay: float = 0.0,
    then: AfterFailure = "auto",
) -> str | None:
    """End an attempt that did not succeed and add it to the attempt history.

    ``failure``: the kind of failure (stored in the attempt's ``outcome`` column).
    ``then="auto"``: back to ``ready`` after ``delay`` seconds while attempts remain, else
    ``failed`` (the dead-letter state). ``then="failed"`` / ``"cancelled"`` forces that
    status. Returns the job's new status, or None if the attempt was fenced off. Error texts
    are stored sanitised (NUL characters escaped) and capped at 10 KB.
    """
    if then not in ("auto", "failed", "cancelled"):
        raise ValueError(f"then must be 'auto', 'failed' or 'cancelled', got {then!r}")
    with cursor_of(alias) as cursor:
        cursor.execute(
            QUERIES["end_attempt"],
            {
                "then": then,
                "delay": float(delay),
                "error": storable_error(error),
                "error_type": storable_text(error_type)[:200],
                "duration_ms": duration_ms,
                "id": fence.job_id,
                "worker": fence.worker_id,
                "attempt": fence.attempt,
                "failure": str(failure),
            },
        )
        row = cursor.fetchone()
    return None if row is None else str(row[0])


# --- running → ready, the attempt given back ---------------------------------------------


SHUTDOWN = "WorkerShutdown"
SHUTDOWN_NOTE = "the worker shut down before the job finished; the attempt was given back"


def release(
    alias: str,
    fences: Sequence[Fence],
    *,
    failure: FailureKind = FailureKind.RELEASED,
    error_type: str = SHUTDOWN,
    error: str = SHUTDOWN_NOTE,
    delay: float = 0.0,
    limit: int | None = None,
) -> list[int]:
    """running → ready, giving the attempt back (it does not count): at shutdown, for an
    attempt its database connection failed under (``error_type`` says which), and for a
    handler that snoozed (``failure`` is then ``snoozed``, as its history row says).

    The job is due again after ``delay`` seconds. With ``limit``, an attempt already given
    back ``limit`` times for this ``error_type`` is not given back again (its id is missing
    from the result, as is a fenced-off one's): the caller then charges it. Returns the
    ids given back.
    """
    if not fences:
        return []
    with cursor_of(alias) as cursor:
        cursor.execute(
            QUERIES["release"],
            {
                "ids": [f.job_id for f in fences],
                "attempts": [f.attempt for f in fences],
                "worker": fences[0].worker_id,
                "delay": float(delay),
                "limit": limit,
                "failure": failure.value,
                "error_type": error_type,
                "error": storable_error(error),
            },
        )
        return [int(r[0]) for r in cursor.fetchall()]


# --- running → ready, the attempt given back by a worker that is not running it ---------


NOT_RUN_BY_WORKER = "NotRunByWorker"


@dataclass(frozen=True)
class Claim:
    """An attempt the database says a worker is running: which attempt of which job, and
    when it was claimed (two claims of one attempt number differ there)."""

    job_id: int
    attempt: int
    claimed_at: datetime


@dataclass(frozen=True)
class Unheld:
    """An attempt given back by :func:`release_unheld`, and what became of its job."""

    job_id: int
    job_type: str
    queue: str
    status: str  # ready, or cancelled when a cancel had been requested
    attempt: int


def claims_of(alias: str, worker_id: str, since: float) -> list[Claim]:
    """The attempts marked ``running`` under ``worker_id`` in the database, claimed at
    ``since`` (epoch seconds) or later."""
    with cursor_of(alias) as cursor:
        cursor.execute(QUERIES["claims_of_worker"], [worker_id, since])
        return [Claim(int(r[0]), int(r[1]), r[2]) for r in cursor.fetchall()]


def release_unheld(alias: str, worker_id: str, claims: Sequence[Claim], note: str) -> list[Unheld]:
    """running → ready for attempts marked as ``worker_id``'s that it is not running (their
    end was lost, e.g. by a failover), on that worker's own word.

    Fenced on each claim (the attempt number and the claim's time), so an attempt claimed
    again since is left alone. The attempt is recorded (outcome ``released``, error type
    ``NotRunByWorker``, ``note`` as its text and the job's last error) and given back
    (``max_attempts + 1``, its number not reused); a job with a cancel request becomes
    ``cancelled``. Returns the attempts given back.
    """
    if not claims:
        return []
    with cursor_of(alias) as cursor:
        return give_back(
            cursor,
            worker_id,
            [(c.job_id, c.attempt, c.claimed_at) for c in claims],
            NOT_RUN_BY_WORKER,
            note,
            on_job=True,
        )


def give_back(
    cursor: Any,
    worker_id: str,
    attempts: Sequence[tuple[int, int, datetime | None]],
    error_type: str,
    note: str,
    *,
    on_job: bool,
) -> list[Unheld]:
    """running → ready (cancelled, with a cancel request) for ``attempts`` (job id, attempt
    number, claim time or None for any) run by ``worker_id``: the one statement that gives
    an attempt back, for :func:`release_unheld` and an operator's release. The attempt is
    recorded (outcome ``released``, ``error_type``, ``note``; with ``on_job``, the job's
    last error too), uncharged; idle workers of the queues are woken. Returns what it gave
    back."""
    cursor.execute(
        QUERIES["give_back"],
        {
            "ids": [job_id for job_id, _, _ in attempts],
            "attempts": [attempt for _, attempt, _ in attempts],
            "claimed": [claimed for _, _, claimed in attempts],
            "worker": worker_id,
            "error_type": error_type,
            "note": storable_error(note),
            "on_job": on_job,
        },
    )
    released = [Unheld(int(r[0]), r[1], r[2], r[3], int(r[4])) for r in cursor.fetchall()]
    notify_queues(cursor, [r.queue for r in released if r.status == "ready"])
    return released


def save_progress(alias: str, fence: Fence, progress_json: str) -> bool:
    """Record a running attempt's progress (JSON checked by the caller)."""
    with cursor_of(alias) as cursor:
        cursor.execute(
            QUERIES["save_progress"],
            [progress_json, fence.job_id, fence.worker_id, fence.attempt],
        )
        return bool(cursor.rowcount == 1)


def mark_started(alias: str, fences: Sequence[Fence]) -> None:
    """Record that the handlers of these attempts started (one worker's, one statement).

    A rescue gives back the attempt of a job whose current attempt never started (a job a
    killed worker had claimed ahead but not run), and counts it otherwise.
    """
    if not fences:
        return
    with cursor_of(alias) as cursor:
        cursor.execute(
            QUERIES["mark_started"],
            [[f.job_id for f in fences], [f.attempt for f in fences], fences[0].worker_id],
        )


# --- rescue: running (worker gone) → ready | failed | cancelled ---------------------------


@dataclass(frozen=True)
class Rescued:
    job_id: int
    job_type: str
    status: str
    attempt: int
    worker_id: str | None
    charged: bool = True  # False: the attempt never started and was given back


def rescue_stale(
    alias: str, stale_after: float, worker_id: str | None = None
) -> list[Rescued] | None:
    """Give back running jobs whose worker stopped heartbeating ``stale_after`` seconds ago,
    or, given ``worker_id``, every running job of that worker (an operator says it is gone).

    They go to ``ready`` (or ``failed`` when no attempts are left, ``cancelled`` when a
    cancel was requested). An attempt whose handler never started (see
    :func:`mark_started`) is given back instead of counted. Only one rescuer runs at a time
    across all workers: returns None when another holds the lock. Forgets workers that
    stopped heartbeating (and ``worker_id``) as well.
    """
    with transaction.atomic(using=alias), cursor_of(alias) as cursor:
        cursor.execute(QUERIES["take_rescuer_lock"], [REAPER_LOCK_KEY])
        if not cursor.fetchone()[0]:
            return None
        cursor.execute(
            QUERIES["rescue"],
            {"stale": float(stale_after), "give_back": GIVE_BACK_LIMIT, "worker": worker_id},
        )
        rows = cursor.fetchall()
        cursor.execute(QUERIES["forget_stale_workers"], [float(stale_after), worker_id])
    return [Rescued(int(r[0]), r[1], r[2], int(r[3]), r[4], bool(r[5])) for r in rows]
