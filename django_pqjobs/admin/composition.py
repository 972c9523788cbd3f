"""What the batch page and the job page read of batches and dependencies, and how the job
page shows them.

A batch can have a million members and a job a million dependents, so nothing here lists
them all: a batch page counts its members by status in one GROUP BY (the partial index
``pqjobs_job_batch``), a job page reads the first ``SHOWN_EDGES`` dependencies and
dependents (one query) and counts the rest only when there are more, up to
``COUNT_CAP``. The rest are a link away, in the job list filtered by batch or by job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db import connections
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..models import Batch, Job
from ..sql import queries
from . import display

QUERIES = queries("admin_composition")

SHOWN_EDGES = 50
SHOWN_CALLBACK_JOBS = 30
COUNT_CAP = 100_000


@dataclass(frozen=True)
class LinkedJob:
    id: int
    status: str | None  # None: the row is gone (deleted or pruned)
    job_type: str = ""


@dataclass(frozen=True)
class Linked:
    """Some jobs linked to a job or a batch: the ones shown, and how many there are."""

    jobs: list[LinkedJob] = field(default_factory=list)
    total: int = 0
    capped: bool = False  # there are more than ``total`` (counting stopped there)

    @property
    def more(self) -> int:
        """How many are not shown."""
        return self.total - len(self.jobs)


@dataclass(frozen=True)
class BatchRef:
    """What a job page says of a batch."""

    id: int
    label: str
    total: int
    pending: int
    sealed: bool
    finishes: int

    @property
    def finished(self) -> int:
        return self.total - self.pending


@dataclass
class JobLinks:
    """A job's batch, the batch whose callback it is, its dependencies and dependents."""

    batch: BatchRef | None = None
    callback_of: BatchRef | None = None
    dependencies: Linked = field(default_factory=Linked)
    dependents: Linked = field(default_factory=Linked)


# The first dependencies (in id order: the unique index (job_id, depends_on_id)) and
# dependents (in index order; sorted after) of a job, each with its status.
_EDGES = """
(SELECT 'dependency', d.depends_on_id, j.status
 FROM pqjobs_dependency d LEFT JOIN pqjobs_job j ON j.id = d.depends_on_id
 WHERE d.job_id = %(id)s ORDER BY d.depends_on_id LIMIT %(limit)s)
UNION ALL
(SELECT 'dependent', d.job_id, j.status
 FROM pqjobs_dependency d LEFT JOIN pqjobs_job j ON j.id = d.job_id
 WHERE d.depends_on_id = %(id)s LIMIT %(limit)s)
"""
_COUNT_EDGES = QUERIES["count_edges"]
_MEMBERS_BY_STATUS = QUERIES["members_by_status"]
_CALLBACK_JOBS = QUERIES["callback_jobs"]
_COUNT_CALLBACK_JOBS = QUERIES["count_callback_jobs"]


def _rows(alias: str, sql: str, params: Any) -> list[tuple[Any, ...]]:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def _counted(alias: str, jobs: list[LinkedJob], count_sql: str, key: int, shown: int) -> Linked:
    """``jobs`` (one more than ``shown`` read, if there are more) and how many there are."""
    if len(jobs) <= shown:
        return Linked(jobs, len(jobs))
    ((total,),) = _rows(alias, count_sql, [key, COUNT_CAP + 1])
    return Linked(jobs[:shown], min(total, COUNT_CAP), capped=total > COUNT_CAP)


def load_job_links(alias: str, job: Job) -> JobLinks:
    """A job's links: one query for its edges, one more for its batches if it has any, and
    a count of the edges beyond the first ``SHOWN_EDGES`` of a side if there are more."""
    links = JobLinks()
    batch_ids = {pk for pk in (job.batch_id, job.callback_of_id) if pk is not None}
    if batch_ids:
        refs = {
            row[0]: BatchRef(*row)
            for row in Batch.objects.using(alias)
            .filter(pk__in=batch_ids)
            .values_list("id", "label", "total", "pending", "sealed", "finishes")
        }
        links.batch = refs.get(job.batch_id) if job.batch_id is not None else None
        links.callback_of = refs.get(job.callback_of_id) if job.callback_of_id else None
        # A batch row that is gone (deleted by hand) still has its id shown.
        if job.batch_id is not None and links.batch is None:
            links.batch = BatchRef(job.batch_id, "", 0, 0, False, 0)
        if job.callback_of_id is not None and links.callback_of is None:
            links.callback_of = BatchRef(job.callback_of_id, "", 0, 0, False, 0)
    sides: dict[str, list[LinkedJob]] = {"dependency": [], "dependent": []}
    for side, pk, status in _rows(alias, _EDGES, {"id": job.pk, "limit": SHOWN_EDGES + 1}):
        sides[side].append(LinkedJob(pk, status))
    dependents = sorted(sides["dependent"], key=lambda linked: linked.id)
    links.dependencies = _counted(
        alias, sides["dependency"], _COUNT_EDGES.format(column="job_id"), job.pk, SHOWN_EDGES
    )
    links.dependents = _counted(
        alias, dependents, _COUNT_EDGES.format(column="depends_on_id"), job.pk, SHOWN_EDGES
    )
    return links


def members_by_status(alias: str, batch_id: int) -> dict[str, int]:
    """How many members of the batch are in each status now (one index scan)."""
    return {status: count for status, count in _rows(alias, _MEMBERS_BY_STATUS, [batch_id])}


def callback_jobs(alias: str, batch_id: int) -> Linked:
    """The callback jobs the batch's finishes enqueued, newest first."""
    jobs = [
        LinkedJob(pk, status, job_type)
        for pk, status, job_type in _rows(
            alias, _CALLBACK_JOBS, [batch_id, SHOWN_CALLBACK_JOBS + 1]
        )
    ]
    return _counted(alias, jobs, _COUNT_CALLBACK_JOBS, batch_id, SHOWN_CALLBACK_JOBS)


# --- the job list's filters, and links to them ---------------------------------------------


def job_list_url(**filters: Any) -> str:
    """The job list, filtered (``batch__id__exact``, ``status__exact``,
    ``callback_of__id__exact``, ``dependencies_of``, ``dependents_of``)."""
    query = "&".join(f"{name}={value}" for name, value in filters.items())
    return f"{reverse('admin:django_pqjobs_job_changelist')}?{query}"


def job_url(pk: int) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[pk])


def batch_url(pk: int) -> str:
    return reverse("admin:django_pqjobs_batch_change", args=[pk])


# --- the job page ---------------------------------------------------------------------------

_ATTRIBUTE = "_pqjobs_links"


def attach(job: Job, links: JobLinks) -> None:
    setattr(job, _ATTRIBUTE, links)


def links_of(job: Job) -> JobLinks:
    links = getattr(job, _ATTRIBUTE, None)
    return links if isinstance(links, JobLinks) else JobLinks()


def batch_link(ref: BatchRef | None) -> SafeString | str:
    """``batch #12 nightly (7 / 10 finished)``, a link to the batch page."""
    if ref is None:
        return "-"
    label = format_html(" {}", ref.label) if ref.label else ""
    progress = f" ({ref.finished} / {ref.total} finished)" if ref.sealed else ""
    return format_html('<a href="{}">batch #{}</a>{}{}', batch_url(ref.id), ref.id, label, progress)


def job_links(linked: Linked, all_url: str) -> SafeString | str:
    """Links to the jobs shown, each with its status badge; then how many more, with a
    link to all of them in the job list."""
    if not linked.total:
        return "-"
    items = format_html_join(
        mark_safe(" "),
        '<span class="pqjobs-linked"><a href="{}">#{}</a> {}</span>',
        (
            (
                job_url(j.id),
                j.id,
                display.status_badge(j.status) if j.status else "(deleted)",
            )
            for j in linked.jobs
        ),
    )
    if linked.more <= 0:
        return format_html('<div class="pqjobs-linked-jobs">{}</div>', items)
    more = f"more than {linked.more:,}" if linked.capped else f"{linked.more:,}"
    return format_html(
        '<div class="pqjobs-linked-jobs">{}</div><p class="help">and {} more: '
        '<a href="{}">all of them in the job list</a></p>',
        items,
        more,
        all_url,
    )


def dependencies(job: Job) -> SafeString | str:
    """The job's dependencies; for a waiting job, how many of them are not finished."""
    shown = job_links(links_of(job).dependencies, job_list_url(dependencies_of=job.pk))
    if job.status != "waiting":
        return shown
    return format_html("<p>{} not finished yet</p>{}", job.waiting_for, shown)


def dependents(job: Job) -> SafeString | str:
    return job_links(links_of(job).dependents, job_list_url(dependents_of=job.pk))
