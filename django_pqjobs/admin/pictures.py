"""Pictures on the console's pages, drawn on the server as SVG like the dashboard's
throughput chart: a job's timeline (its waits, attempts, sleeps, snoozes, parks, workflow
steps and what operators did, on one time axis), a graph of the jobs around a job or in a
batch (nodes coloured by status, each a link to its job's page), and the dashboard's
active jobs by queue.

The drawings are each a module (``timelinesvg.py``, ``graphsvg.py``, ``activesvg.py``, what
they share ``svg.py``); their names are also this module's. They are pure: they take data,
never read the database, and escape every text they draw (``format_html``). Text that comes
from outside (job types, step names, queue names, operators' names) is made printable and
cut short first, so a NUL, a lone surrogate or a 10 MB name draws as a few escaped
characters. Nothing of a job's payload, result or error is ever drawn: only ids, statuses,
types, names and times. Each picture is bounded (``MAX_ROWS``, ``MAX_NODES``,
``MAX_QUEUES``), so a 10,000-job batch draws the same few kilobytes as a small one and says
how many it leaves out, with a link.

The gathering functions (``job_pictures``, ``batch_pictures``, ``dashboard_pictures``)
read what the pictures need with a few small queries, beside what the page already read
(``excerpts.JobPage``, ``composition.JobLinks``, ``dashboard.Dashboard``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db import connections
from django.utils import timezone
from django.utils.safestring import SafeString, mark_safe

from ..models import Job
from ..sql import queries
from . import composition, excerpts
from .activesvg import ACTIVE_STATUSES, MAX_QUEUES, active_svg
from .graphsvg import (
    BATCH_COLOUR,
    GONE_COLOUR,
    MAX_NODES,
    Edge,
    Graph,
    Node,
    graph_svg,
    job_node,
    more_node,
)
from .svg import LABEL_CHARS, TITLE_CHARS, UNKNOWN_COLOUR, clean
from .timelinesvg import (
    KIND_COLOURS,
    MAX_ROWS,
    AttemptRow,
    Span,
    StepRow,
    job_spans,
    timeline_svg,
)

__all__ = [
    "ACTIVE_STATUSES",
    "BATCH_COLOUR",
    "GONE_COLOUR",
    "KIND_COLOURS",
    "LABEL_CHARS",
    "MAX_NODES",
    "MAX_QUEUES",
    "MAX_ROWS",
    "SHOWN_STEPS",
    "TITLE_CHARS",
    "UNKNOWN_COLOUR",
    "AttemptRow",
    "Edge",
    "Graph",
    "Node",
    "Span",
    "StepRow",
    "active_svg",
    "batch_pictures",
    "clean",
    "dashboard_pictures",
    "graph_svg",
    "job_graph_svg",
    "job_node",
    "job_pictures",
    "job_spans",
    "more_node",
    "timeline_svg",
]

QUERIES = queries("admin_pictures")

SHOWN_STEPS = 200  # a workflow's steps read for its timeline (as its steps table)


# --- what the pages read for them ------------------------------------------------------------

_STEP_ROWS = QUERIES["step_rows"]
# The first children of a job (through the partial index on parent_id; enqueued after their
# parent, so only ids above it are looked at) and the jobs of the given ids (its parent, its
# dependencies and dependents), each with its status and type.
_AROUND = """
(SELECT 'child', id, status, job_type FROM pqjobs_job
 WHERE parent_id = %(id)s AND id > %(id)s ORDER BY id LIMIT %(limit)s)
UNION ALL
(SELECT 'near', id, status, job_type FROM pqjobs_job WHERE id = ANY(%(ids)s))
"""
# A batch's first members (through the partial index on batch_id), each with the first of
# its dependencies (to draw those among the members).
_MEMBERS = QUERIES["members"]
# The child jobs a workflow's steps enqueued, by step name (the id only of the step's result).
_CHILD_STEPS = QUERIES["child_steps"]


def _rows(alias: str, sql: str, params: Any) -> list[tuple[Any, ...]]:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def job_pictures(job: Job, alias: str, now: datetime | None = None) -> dict[str, Any]:
    """The job page's pictures, for its template: ``pqjobs_timeline`` and (when the job
    has a batch, a parent, children, dependencies or dependents) ``pqjobs_graph``. Reads
    the job's steps (no result) and the types of the jobs around it; the attempts, the
    operator actions and the links are the page's (``excerpts``, ``composition``)."""
    now = now or timezone.now()
    page = excerpts.page_of(job)
    attempts = [
        AttemptRow(a.attempt, a.outcome, a.started_at, a.finished_at, a.worker_id)
        for a in page.attempts
    ]
    steps = (
        [StepRow(*row) for row in _rows(alias, _STEP_ROWS, [job.pk, SHOWN_STEPS])]
        if page.has_steps
        else []
    )
    spans = job_spans(job, attempts, steps, page.events, now, page.attempts_not_shown)
    zone = timezone.localtime(now).strftime("%Z")
    return {
        "pqjobs_timeline": timeline_svg(spans, now, zone),
        "pqjobs_graph": job_graph_svg(job, alias, page.has_steps),
    }


def job_graph_svg(job: Job, alias: str, has_steps: bool) -> SafeString:
    """The jobs around ``job``: its batch, its parent, its dependencies, itself, its
    dependents and its children (a workflow's child jobs, by step name)."""
    links = composition.links_of(job)
    graph = Graph(label=f"jobs linked to job {job.pk}")
    me = f"job:{job.pk}"
    around = [j.id for j in links.dependencies.jobs + links.dependents.jobs]
    if job.parent_id:
        around.append(job.parent_id)
    children: list[tuple[int, str, str]] = []
    types: dict[int, tuple[str, str]] = {}
    for side, pk, status, job_type in _rows(
        alias, _AROUND, {"id": job.pk, "limit": MAX_NODES // 3, "ids": around}
    ):
        if side == "child":
            children.append((pk, status, job_type))
        types[pk] = (status, job_type)
    for ref, kind in ((links.batch, "member"), (links.callback_of, "callback")):
        if ref is not None:
            url = composition.batch_url(ref.id)
            graph.add(Node(f"batch:{ref.id}", f"batch #{ref.id}", ref.label, url, kind="batch"))
            graph.link(f"batch:{ref.id}", me, kind, f"{kind} of batch {ref.id}")
    if job.parent_id:
        status, job_type = types.get(job.parent_id, (None, ""))
        graph.add(job_node(job.parent_id, status, job_type, what="parent"))
        graph.link(f"job:{job.parent_id}", me, "child", "parent of this job")
    for linked in links.dependencies.jobs:
        status, job_type = types.get(linked.id, (linked.status, ""))
        graph.add(job_node(linked.id, status, job_type))
        graph.link(f"job:{linked.id}", me, "depends", "this job depends on it")
    if links.dependencies.more > 0:
        url = composition.job_list_url(dependencies_of=job.pk)
        graph.add(
            more_node("dependencies", links.dependencies.more, url, links.dependencies.capped)
        )
        graph.link("more:dependencies", me, "more")
    graph.add(job_node(job.pk, job.status, job.job_type, focus=True))
    for linked in links.dependents.jobs:
        status, job_type = types.get(linked.id, (linked.status, ""))
        graph.add(job_node(linked.id, status, job_type))
        graph.link(me, f"job:{linked.id}", "depends", "depends on this job")
    if links.dependents.more > 0:
        url = composition.job_list_url(dependents_of=job.pk)
        graph.add(more_node("dependents", links.dependents.more, url, links.dependents.capped))
        graph.link(me, "more:dependents", "more")
    step_of = (
        {pk: name for name, pk in _rows(alias, _CHILD_STEPS, [job.pk, SHOWN_STEPS]) if pk}
        if has_steps and children
        else {}
    )
    for pk, status, job_type in children:
        graph.add(job_node(pk, status, job_type))
        step = step_of.get(pk)
        graph.link(me, f"job:{pk}", "child", f"child step {step}" if step else "child job")
    if len(graph.nodes) == 1:
        return mark_safe("")
    return graph_svg(graph)


def batch_pictures(
    batch_id: int,
    label: str,
    alias: str,
    present: int,
    callbacks: composition.Linked,
) -> dict[str, Any]:
    """The batch page's graph (``pqjobs_graph``): the batch, its first ``MAX_NODES``
    members (by id) and the dependencies among them (one query), the callback jobs its
    finishes enqueued (``callbacks``, as the page read them), and a node counting the
    members not drawn (``present``: the members in the job table, as the page counted
    them), a link to them all in the job list."""
    members = _rows(alias, _MEMBERS, [batch_id, MAX_NODES])
    graph = Graph(label=f"batch {batch_id} and its members")
    me = f"batch:{batch_id}"
    all_url = composition.job_list_url(batch__id__exact=batch_id)
    graph.add(Node(me, f"batch #{batch_id}", label, composition.batch_url(batch_id), kind="batch"))
    for pk, status, job_type, _ in members:
        graph.add(job_node(pk, status, job_type))
        graph.link(me, f"job:{pk}", "member", f"member of batch {batch_id}")
    for pk, _, _, depends_on in members:
        for other in depends_on or ():
            graph.link(f"job:{other}", f"job:{pk}", "depends", "depends on")
    more = max(present - len(members), 0)
    if more:
        graph.add(more_node("members", more, all_url))
        graph.link(me, "more:members", "more")
    for linked in callbacks.jobs[:6]:
        graph.add(job_node(linked.id, linked.status, linked.job_type))
        graph.link(me, f"job:{linked.id}", "callback", "a callback of the batch")
    return {
        "pqjobs_graph": graph_svg(graph),
        "pqjobs_graph_more": more,
        "pqjobs_graph_more_url": all_url,
    }


def dashboard_pictures(active: Sequence[dict[str, Any]], list_url: str) -> dict[str, Any]:
    """The dashboard's picture of its active jobs (no query: the dashboard read them)."""
    return {"pqjobs_active": active_svg(active, list_url)}
