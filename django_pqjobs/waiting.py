"""Waiting for a job's result: ``wait_for()`` and ``wait_for_async()``.

The waiter LISTENs on ``pqjobs_finished`` on a connection of its own (autocommit: it never
holds a transaction open), marks the job ``waited_on`` so that its finish is announced
(sql/schema/composition.sql), and reads the job again when the announcement comes. A slow
poll covers a lost connection or a notification sent before the LISTEN; it is a fallback, not the
way results arrive.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from . import options
from .conf import conf
from .durations import Duration
from .errors import (
    InvalidJobOption,
    JobExpired,
    JobFailed,
    JobNotFound,
    JobWasCancelled,
    WaitTimeout,
)
from .notify import listening_connection
from .protection import reveal_value
from .serialization import from_json
from .sql import queries

QUERIES = queries("waiting")

__all__ = ["wait_for", "wait_for_async"]

FINISHED_CHANNEL = "pqjobs_finished"
# How often the job is read again when no notification arrives (the fallback).
POLL_INTERVAL = 5.0

# SKIP LOCKED: a job row held by a long transaction (an atomic job's, an enqueuer's) must
# not hold the waiter past its timeout; it tries again on its next look.
# A job not finished is on the hot shelf: the hot partition alone is planned and locked.
_MARK = QUERIES["mark"]
# Read on the hot shelf first; on every shelf (history) only if it is not there.
_READ = QUERIES["read"]
_READ_HOT = _READ.format(shelf="shelf = 'hot' AND")
_READ_ANY = _READ.format(shelf="")
# How soon to look again while the job could not be marked (its row was locked).
_MARK_RETRY = 0.05


def result_of(job_id: int, row: tuple[Any, ...]) -> tuple[bool, Any]:
    """(finished, result) from the job's row; raises for a failed, cancelled or expired
    job."""
    status, result, error_type, error = row[:4]
    if status == "done":
        # an encrypted type's result is opened here, for the application that waits
        opened = (
            None
            if result is None
            else reveal_value(from_json(result), f"job {job_id}'s result", row[5])
        )
        return True, opened
    if status == "failed":
        raise JobFailed(job_id, status, error_type, error)
    if status == "cancelled":
        raise JobWasCancelled(job_id, status, error_type, error)
    if status == "expired":
        raise JobExpired(job_id, status, error_type, error)
    return False, status


def wait_for(
    job_id: int,
    timeout: Duration | None = None,
    *,
    poll_interval: Duration = POLL_INTERVAL,
    using: str | None = None,
) -> Any:
    """Wait until job ``job_id`` is finished and return its result.

    Raises :class:`~django_pqjobs.JobFailed` if it failed for good,
    :class:`~django_pqjobs.JobWasCancelled` if it was cancelled,
    :class:`~django_pqjobs.JobExpired` if its deadline passed before it could start,
    :class:`~django_pqjobs.WaitTimeout` after ``timeout`` (seconds or a timedelta; None
    waits as long as it takes) and :class:`~django_pqjobs.JobNotFound` for an unknown id.

    Woken by a notification the moment the job's finish commits; the job is read again
    every ``poll_interval`` seconds only in case one was missed. Uses a connection of its
    own and no transaction, so it can be called from a view or a script; it refuses to run
    inside ``transaction.atomic()`` (a job enqueued in that transaction cannot finish before
    it commits, and waiting would hold it open).
    """
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id < 1:
        raise InvalidJobOption(f"wait_for() job_id must be a job id, got {job_id!r:.120}")
    limit = None if timeout is None else options.timeout(timeout, "wait_for() timeout")
    poll = options.timeout(poll_interval, "wait_for() poll_interval")
    alias = using or conf.DATABASE
    if connections[alias].in_atomic_block:
        raise InvalidJobOption(
            "wait_for() inside transaction.atomic(): a job enqueued in this transaction "
            "cannot finish before it commits, and waiting would hold the transaction open; "
            "wait after the commit"
        )
    deadline = None if limit is None else time.monotonic() + limit
    listen_alias = conf.LISTEN_DATABASE if conf.raw("LISTEN_DATABASE") else alias
    with ExitStack() as stack:
        conn = stack.enter_context(listening_connection(alias))
        # Behind PgBouncer in transaction mode, LISTEN needs the direct connection.
        listener = (
            conn
            if listen_alias == alias
            else stack.enter_context(listening_connection(listen_alias))
        )
        listener.execute(f"LISTEN {FINISHED_CHANNEL}")
        text = str(job_id)
        while True:
            conn.execute(_MARK, [job_id])
            row = conn.execute(_READ_HOT, [job_id]).fetchone()
            if row is None:
                row = conn.execute(_READ_ANY, [job_id]).fetchone()
            if row is None:
                raise JobNotFound(job_id)
            finished, value = result_of(job_id, row)
            if finished:
                return value
            wait = poll if row[4] else min(poll, _MARK_RETRY)
            if deadline is not None:
                wait = min(wait, deadline - time.monotonic())
            if wait <= 0:
                assert limit is not None
                raise WaitTimeout(job_id, limit, str(value))
            for note in listener.notifies(timeout=wait):
                if note.payload == text:
                    break


async def wait_for_async(
    job_id: int,
    timeout: Duration | None = None,
    *,
    poll_interval: Duration = POLL_INTERVAL,
    using: str | None = None,
) -> Any:
    """:func:`wait_for` for async views and code: waits in a thread of its own, so the
    event loop goes on meanwhile."""
    wait = sync_to_async(wait_for, thread_sensitive=False)
    return await wait(job_id, timeout, poll_interval=poll_interval, using=using)
