"""The framework's ``task_finished`` signal, sent in the worker process for jobs that are
tasks: each task's job type calls :func:`finished` (its ``on_finished``, see
:mod:`.runner`) where the worker sends ``job_finished``. Not a receiver of that signal: a
receiver is called for every job of every type, and Django's dispatch to it cost every job
of a worker that had met a task a noticeable share of a no-op job (docs/benchmarks.md).

It goes out after each attempt's outcome is recorded — SUCCESSFUL, FAILED, or READY when
the task failed and will be retried — through the signals of the task's own family, with
``sender=PQJobsBackend``. As with the framework's own backends, the ``TaskResult`` sent with
``task_started`` (by the task's handler, see :mod:`.runner`) is the one updated and sent at
the end. A receiver that raises is logged; it never stops the worker. A signal nothing
would receive is not sent (see :mod:`.sending`).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django.utils import timezone

from . import results
from .binding import RETURN_VALUE, STARTED_RESULT, BoundTask
from .sending import observed, send

if TYPE_CHECKING:
    from ..models import Job

# job_finished's outcome -> the job's status after it ("lost" sends nothing: the attempt's
# outcome was discarded, another worker owns the job now; nor does "released", an attempt
# given back that the task never finished). A snooze is the task's own "later", like a retry.
_STATUS_AFTER = {
    "done": "done",
    "retry": "ready",
    "snoozed": "ready",
    "failed": "failed",
    "cancelled": "cancelled",
    "expired": "expired",
}


def finished(bound: BoundTask, job: Job, outcome: str) -> None:
    """Send ``task_finished`` for an attempt of ``bound``'s task the worker has recorded
    (``outcome`` as ``job_finished`` has it)."""
    status = _STATUS_AFTER.get(outcome)
    if status is None:
        return
    level = logging.INFO if status in ("done", "ready") else logging.ERROR
    if not observed(bound.family, bound.family.task_finished, level):
        return
    return_value = getattr(job, RETURN_VALUE, results.MISSING)
    if status == "done" and return_value is not results.MISSING and not results.needs_history(job):
        # The common case, without a query: the attempt ended "now" on this worker's clock
        # (the row holds the database's).
        task_result = getattr(job, STARTED_RESULT, None)
        if task_result is None:
            task_result = results.build(bound.family, bound.task, job, None, status="running")
        results.mark_successful(bound.family, task_result, return_value, timezone.now())
    else:
        from ..models import Job

        alias = _alias(job)
        stored = Job.objects.using(alias).filter(pk=job.id).first()
        if stored is None:
            return
        history = results.load_history(alias, job.id) if results.needs_history(stored) else None
        task_result = results.build(bound.family, bound.task, stored, history)
        sent = getattr(job, STARTED_RESULT, None)
        if sent is not None:
            results.update(sent, task_result)
            task_result = sent
    send(bound.family, bound.family.task_finished, task_result, bound.path)


def _alias(job: Job) -> str:
    from ..conf import conf

    return job._state.db or conf.DATABASE
