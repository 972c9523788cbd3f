"""Announcing how an attempt or a job ended: ``job_finished``, and the job type's own
``on_finished`` (a task's ``task_finished``), once for every ending, whoever made it.

The worker's recorder announces the outcomes it writes. The endings made elsewhere are
announced here too, after the transaction that made them commits: a rescue (the job is
``ready`` again, ``failed`` or ``cancelled``), an operator's cancel, a ready duplicate
replaced, a release (at shutdown, or an operator's), a job past its deadline expired by
the sweep, and the dependents the database
cancelled at that commit because a job they wait for failed, was cancelled or deleted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING

from django.db import connections, transaction

from . import signals
from .registry import registry
from .sql import queries
from .statuses import Outcome

QUERIES = queries("endings")

if TYPE_CHECKING:
    from .models import Job

logger = logging.getLogger("django_pqjobs")

# A job's status after an ending made outside the worker's recorder -> the outcome announced.
OUTCOME_OF_STATUS: dict[str, Outcome] = {
    "ready": "retry",
    "failed": "failed",
    "cancelled": "cancelled",
    "expired": "expired",
}


def announce(job: Job, outcome: Outcome, error: str | None = None) -> None:
    """Call the job type's ``on_finished`` (one that raises is logged) and send
    ``job_finished``."""
    job_type = registry.get(job.job_type)
    if job_type is not None and job_type.on_finished is not None:
        try:
            job_type.on_finished(job, outcome)
        except Exception:
            logger.exception("the finish callback of job %s raised", job.id)
    signals.job_finished.send(sender=job.job_type, job=job, outcome=outcome, error=error)


def announce_stored(
    alias: str,
    outcomes: Mapping[int, Outcome],
    *,
    dependents_of: Iterable[int] = (),
    at: datetime | None = None,
) -> None:
    """Announce jobs a statement ended (read back, one query), and the dependents the
    database cancelled because ``dependents_of`` ended (``at``: when, if those rows are
    gone; else their own ``finished_at``)."""
    ended = dict(outcomes)
    roots = list(dependents_of)
    if roots:
        ended.update(dict.fromkeys(_cancelled_dependents(alias, roots, at), "cancelled"))
    if not ended:
        return
    from .models import Job  # needs the app registry, which importing this may precede

    jobs = Job.objects.using(alias).in_bulk(list(ended))
    for job_id, outcome in ended.items():
        job = jobs.get(job_id)
        if job is not None:  # deleted meanwhile: nothing left to say it about
            announce(job, outcome, job.last_error or None)


def announce_after_commit(
    alias: str,
    outcomes: Mapping[int, Outcome],
    *,
    dependents_of: Iterable[int] = (),
    at: datetime | None = None,
) -> None:
    """:func:`announce_stored` once the current transaction on ``alias`` commits (at once
    outside one); nothing if it rolls back."""
    outcomes, roots = dict(outcomes), list(dependents_of)
    if outcomes or roots:
        transaction.on_commit(
            lambda: announce_stored(alias, outcomes, dependents_of=roots, at=at), using=alias
        )


# The settle trigger cancels a dependent in the transaction that ended its dependency, so
# its finished_at is that transaction's now(): the one of the dependency's own ending (or
# ``at``). Cascades (dependents of a cancelled dependent) carry the same time.
_CANCELLED_DEPENDENTS = QUERIES["cancelled_dependents"]


def _cancelled_dependents(alias: str, roots: list[int], at: datetime | None) -> list[int]:
    with connections[alias].cursor() as cursor:
        cursor.execute(_CANCELLED_DEPENDENTS, {"roots": roots, "at": at})
        return [int(row[0]) for row in cursor.fetchall()]
