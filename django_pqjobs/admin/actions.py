"""The job actions of the admin: Retry, Cancel, Run now, Skip, End wait, Delete (bulk and per
job), the forced Release of one stuck attempt, and sending a workflow a signal.

Each is an operator action of ``operations.py``, done under the user's name (so it lands in
the audit trail) and reported as how many jobs it changed and how many it skipped, and why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import ngettext

from .. import operations
from ..conf import conf

# Bulk deletes go in batches of this many jobs, each in its own short transaction.
DELETE_BATCH = 5000


def actor(request: HttpRequest) -> str:
    """Who acts: the user's username (its id when the user model has none)."""
    user = request.user
    return user.get_username() or f"user {user.pk}"


@dataclass(frozen=True)
class Action:
    verb: str  # "put back to ready": what it did to each job it changed
    skipped_because: str
    run: Callable[[Sequence[int], str], int]  # (job ids, who) -> how many it changed

    def report(self, changed: int, asked: int) -> str:
        """``2 jobs put back to ready. 4 skipped: only failed or cancelled jobs retry, ...``"""
        text = ngettext("%(n)d job %(verb)s.", "%(n)d jobs %(verb)s.", changed) % {
            "n": changed,
            "verb": self.verb,
        }
        skipped = asked - changed
        if skipped:
            text += " " + ngettext(
                "%(n)d skipped: %(why)s.", "%(n)d skipped: %(why)s.", skipped
            ) % {"n": skipped, "why": self.skipped_because}
        return text


def _retry(ids: Sequence[int], by: str) -> int:
    return len(operations.retry_jobs(ids, by=by, using=conf.DATABASE))


def _cancel(ids: Sequence[int], by: str) -> int:
    result = operations.cancel_jobs(ids, by=by, using=conf.DATABASE)
    return len(result.cancelled) + len(result.cancel_requested)


def _skip(ids: Sequence[int], by: str) -> int:
    return len(operations.skip_jobs(ids, by=by, using=conf.DATABASE))


def _end_wait(ids: Sequence[int], by: str) -> int:
    return len(operations.end_waits(ids, by=by, using=conf.DATABASE))


def _run_now(ids: Sequence[int], by: str) -> int:
    return len(operations.run_jobs_now(ids, by=by, using=conf.DATABASE))


ACTIONS: dict[str, Action] = {
    "retry": Action(
        "put back to ready",
        "only failed, cancelled or expired jobs retry, and not while another job of their type "
        "holds their dedupe key",
        _retry,
    ),
    "cancel": Action(
        "cancelled or asked to stop", "already finished (or cancel already requested)", _cancel
    ),
    "run-now": Action(
        "moved to the head of the queue",
        "only ready jobs can run now (blocked ones wait for flow control)",
        _run_now,
    ),
    "skip": Action(
        "skipped (cancelled, so what waited on it goes on)",
        "only failed jobs can be skipped",
        _skip,
    ),
    "end-wait": Action(
        "woken (their durable sleep or wait ended)",
        "only workflows parked in a sleep or a wait for a signal can be woken",
        _end_wait,
    ),
}


def job_page_message(name: str, job_id: int, changed: bool) -> str:
    """What a button of the job page reports. The page below it shows the job as it is
    now, which may already be later than the action (a worker may have run it again)."""
    action = ACTIONS[name]
    if not changed:
        return f"Job {job_id} was not changed: {action.skipped_because}."
    done = {
        "retry": "retried: it was put back to ready",
        "cancel": "cancelled (a running job is asked to stop)",
        "run-now": "moved to the head of the queue",
        "skip": "skipped: it is cancelled, and the jobs that waited on it go on",
        "end-wait": "woken: its sleep is over, or its wait for a signal times out, and it is ready",
    }[name]
    return f"Job {job_id} {done}. Its status and timeline below show what has happened to it since."


@dataclass(frozen=True)
class Deletion:
    deleted: int
    skipped: int  # running jobs (or jobs deleted meanwhile by someone else)


def delete_selected(queryset: QuerySet, by: str) -> Deletion:
    """Delete the jobs of ``queryset`` except running ones, in batches (a selection across
    the whole list can be millions of jobs)."""
    deleted = asked = 0
    for ids in _batches(queryset):
        asked += len(ids)
        deleted += len(operations.delete_jobs(ids, by=by, using=conf.DATABASE))
    return Deletion(deleted, asked - deleted)


def _batches(queryset: QuerySet) -> Iterator[list[int]]:
    """The ids of ``queryset`` in ascending batches (keyset pagination on the primary key)."""
    last = 0
    rows = queryset.order_by("pk").values_list("pk", flat=True)
    while True:
        ids = list(rows.filter(pk__gt=last)[:DELETE_BATCH])
        if not ids:
            return
        yield ids
        last = ids[-1]
