"""The job list's search box, written so every branch is served by an existing index.

Django's ``search_fields`` would OR ``id``, ``job_type``, ``dedupe_key`` and ``locked_by``
together; PostgreSQL can only combine ORed conditions when each one has an index, so a
search that matches nothing read the whole table (over a second on 1,000,000 rows). Here:

- a whole number matches the job id (primary key);
- any term matches the job type exactly (``pqjobs_job_type_id``);
- a dedupe key matches among ready, blocked and running jobs (the unique index
  ``pqjobs_job_unique_key`` holds them; a unique job's key held after it finished is not
  searched);
- a worker id matches the jobs that worker is running now (``pqjobs_job_running``).

A term is whatever an operator typed (or a URL holds): any length, any characters. It is
only compared, never parsed beyond :func:`whole_number`.
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from ..statuses import DEDUPE_STATUSES, JobStatus

HELP_TEXT = (
    "Exact job id or job type; a dedupe key of a ready or running job; "
    "a worker id (its running jobs)."
)


def whole_number(term: str) -> int | None:
    """The id a search term names, if it is one: ASCII digits that fit a bigint.

    ``str.isdigit()`` alone also accepts "²" and other digits ``int()`` refuses."""
    if term.isascii() and term.isdigit() and len(term) < 19:
        return int(term)
    return None


def job_search(queryset: QuerySet, term: str) -> QuerySet:
    term = term.strip()
    if not term:
        return queryset
    condition = Q(job_type=term)
    # The statuses of the unique index's predicate, so that it serves the search (a waiting
    # job holds no dedupe key).
    condition |= Q(dedupe_key=term, status__in=DEDUPE_STATUSES)
    condition |= Q(locked_by=term, status=JobStatus.RUNNING)
    number = whole_number(term)
    if number is not None:
        condition |= Q(pk=number)
    return queryset.filter(condition)
