"""Why a job is not running: what the job page says under "why it waits".

Each reason is one line, built with format_html from what the job's row and its links (its
dependencies, loaded with the page) say, plus one indexed lookup: the job holding its
dedupe key now, which is the job a duplicate of it met.
"""

from __future__ import annotations

from django.db import connections
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..models import Job, Step
from ..sql import held_by_key, queries
from ..statuses import FINISHED_STATUSES
from . import composition, display

_NOT_STARTED = ("waiting", "ready", "blocked")
# The job holding a key now (the unique index pqjobs_job_unique_key serves it).
_HOLDER = queries("admin_reasons")["holder"].replace("{held_by_key}", held_by_key())


def why(job: Job, alias: str) -> list[SafeString]:
    """The reasons, most pressing first (none: the job is running, finished, or due)."""
    found: list[SafeString] = []
    if job.status == "waiting" and job.waiting_for == 0:
        found += _parked(job, alias)
    elif job.status == "waiting":
        found += _prerequisites(job)
    elif job.status == "blocked":
        found.append(
            format_html(
                "held back by the {}",
                display.held_by(job.blocked_by, job.concurrency_key, job.rate_key),
            )
        )
    elif job.status == "ready" and job.run_after > timezone.now():
        found.append(format_html("not due until {}", display.moment(job.run_after)))
    if job.status in _NOT_STARTED and job.expires_at is not None:
        found.append(format_html("must start by {}, or it expires", display.moment(job.expires_at)))
    if job.dedupe_key:
        found += _key_holder(job, alias)
    return found


def _parked(job: Job, alias: str) -> list[SafeString]:
    """A durable workflow parked by its handler: the sleep or the wait it is in."""
    waits = list(
        Step.objects.using(alias)
        .filter(job_id=job.pk, finished_at__isnull=True)
        .exclude(kind="step")
        .order_by("-id")
        .values_list("name", "kind", "wake_at")[:1]
    )
    if not waits:
        return [format_html("parked until {}", display.moment(job.run_after))]
    name, kind, wake_at = waits[0]
    if kind == "child":
        return [format_html("waiting for its child job ({}) to finish", name)]
    if kind == "sleep":
        return [format_html("sleeping ({}) until {}", name, display.moment(wake_at))]
    return [
        format_html(
            "waiting for the signal {} (send_signal({}, {!r}, ...)); it times out at {}",
            name,
            job.pk,
            name,
            display.moment(wake_at),
        )
    ]


def _prerequisites(job: Job) -> list[SafeString]:
    shown = composition.links_of(job).dependencies.jobs
    # what the job still waits for: not finished (and not gone), or failed when it halts
    waited = [
        j
        for j in shown
        if j.status is not None
        and (
            j.status not in FINISHED_STATUSES
            or (j.status == "failed" and job.on_dependency_failure == "halt")
        )
    ]
    lines: list[SafeString] = []
    for linked in waited:
        link = format_html('<a href="{}">#{}</a>', composition.job_url(linked.id), linked.id)
        if linked.status == "failed":
            what = (
                "its sequence is halted: {} failed; Retry it (the rest run once it succeeds) "
                "or Skip it"
                if job.sequence_key
                else "{} failed; this job waits until it is retried and succeeds, or skipped"
            )
            lines.append(format_html(what, link))
        elif job.sequence_key:
            lines.append(
                format_html(
                    "its turn in sequence {} comes after {} ({})",
                    job.sequence_key,
                    link,
                    linked.status,
                )
            )
        else:
            lines.append(format_html("waits for {} ({})", link, linked.status))
    if not lines:
        lines.append(format_html("waits for {} dependencies", job.waiting_for))
    return lines


def _key_holder(job: Job, alias: str) -> list[SafeString]:
    with connections[alias].cursor() as cursor:
        cursor.execute(_HOLDER, [job.job_type, job.dedupe_key])
        row = cursor.fetchone()
    if row is None or row[0] == job.pk:
        return []
    return [
        format_html(
            'its key is held by <a href="{}">#{}</a> ({}): a duplicate enqueued now gets that job',
            composition.job_url(row[0]),
            row[0],
            row[1],
        )
    ]


def as_lines(reasons: list[SafeString]) -> SafeString | str:
    """The reasons one per line ("-": none)."""
    if not reasons:
        return "-"
    return format_html_join(mark_safe("<br>"), "{}", ((r,) for r in reasons))
