"""The job list's search box, written so every branch is served by an existing index.

Django's ``search_fields`` would OR ``id``, ``job_type``, ``dedupe_key`` and ``locked_by``
together; PostgreSQL can only combine ORed conditions when each one has an index, so a
search that matches nothing read the whole table (over a second on 1,000,000 rows). Here:

- a whole number matches the job id (primary key);
- any term matches the job type exactly (``pqjobs_job_type_id``);
- a dedupe key matches among ready and running jobs (the partial unique index
  ``pqjobs_job_active_dedupe``; dedupe keys only bind active jobs anyway);
- a worker id matches the jobs that worker is running now (``pqjobs_job_running``).
"""

from __future__ import annotations

from django.db.models import Q, QuerySet

from ..statuses import ACTIVE_STATUSES, JobStatus

HELP_TEXT = (
    "Exact job id or job type; a dedupe key of a ready or running job; "
    "a worker id (its running jobs)."
)


def job_search(queryset: QuerySet, term: str) -> QuerySet:
    term = term.strip()
    if not term:
        return queryset
    condition = Q(job_type=term)
    condition |= Q(dedupe_key=term, status__in=ACTIVE_STATUSES)
    condition |= Q(locked_by=term, status=JobStatus.RUNNING)
    if term.isdigit() and len(term) < 19:  # fits a bigint
        condition |= Q(pk=int(term))
    return queryset.filter(condition)
