"""The job page's fields of what the job holds and what happened to it: its last error (and
why it expired), its payload and result (excerpts; hidden without
``ADMIN_DATA_PERMISSION``), the jobs it is linked to, a workflow's steps, its timeline, its
attempts and their tracebacks."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from .. import flow
from ..conf import conf
from ..models import Job
from ..redaction import redact
from ..serialization import from_json
from ..tasks.payload import describe_call
from . import composition, display, excerpts, firstscreen, jobfacts, timeline, workflow


class JobRecordFields(admin.ModelAdmin):
    """The job page's fields of the job's data, links, errors and history."""

    @admin.display(description="last error")
    def last_error_summary(self, job: Job) -> SafeString:
        """The exception, its message and where it was raised, on the job page's first
        screen (the message only with ``ADMIN_DATA_PERMISSION``); the tracebacks are under
        Errors."""
        page = excerpts.page_of(job)
        if not page.show_data:
            return format_html(
                '<strong>{}</strong><span class="pqjobs-sub">its message and traceback need '
                "the permission {}</span>",
                job.error_type or "error",
                repr(conf.ADMIN_DATA_PERMISSION),
            )
        raised = display.raised_error(page.last_error.text if page.last_error else "")
        where = [raised.where] if raised.where else []
        parts = format_html_join(" · ", "{}", ((p,) for p in [*where, f"attempt {job.attempts}"]))
        below = (
            mark_safe(' · <a href="#pqjobs-tracebacks">traceback below</a>')
            if jobfacts.facts_of(job).has_traceback
            else ""
        )
        return format_html(
            '<div class="pqjobs-error"><strong>{}</strong>{}<span class="pqjobs-sub">{}{}'
            "</span></div>",
            job.error_type or raised.error_type or "error",
            format_html(': <span class="pqjobs-error-message">{}</span>', raised.message)
            if raised.message
            else "",
            parts,
            below,
        )

    @admin.display(description="previous attempt's error")
    def previous_error(self, job: Job) -> SafeString:
        """The error of the attempt before this one (the job waits for its next try, or was
        retried): said as what it is, not as the job's state."""
        return self.last_error_summary(job)

    @admin.display(description="why it expired")
    def expiry(self, job: Job) -> SafeString:
        """An expired job: its deadline, and what held it back (a pause of its queue or
        job type, a limit); the tracebacks only when there is one."""
        lines: list[SafeString | str] = []
        if job.expires_at is not None:
            lines.append(
                format_html("not started by its deadline, {}", display.moment(job.expires_at))
            )
        if job.blocked_by:
            lines.append(
                format_html(
                    "it was held back by the {}",
                    display.held_by(job.blocked_by, job.concurrency_key, job.rate_key),
                )
            )
        pauses: list[flow.Paused] = getattr(job, jobfacts.PAUSES, [])
        for p in pauses:
            if (p.kind, p.name) in (("queue", job.queue), ("job_type", job.job_type)):
                lines.append(
                    format_html(
                        "its {} {} is paused (since {}{})",
                        "queue" if p.kind == "queue" else "job type",
                        p.name,
                        display.moment(p.paused_at),
                        f", by {p.paused_by}" if p.paused_by else "",
                    )
                )
        if not lines:
            page = excerpts.page_of(job)
            text = page.last_error.text if page.last_error else ""
            lines.append(display.first_line(text) or "its deadline passed before it started")
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in lines))

    @admin.display(description="payload")
    def payload_pretty(self, job: Job) -> SafeString | str:
        page = excerpts.page_of(job)
        excerpt = page.payload
        if excerpt is None:
            return "-"
        # A task of Django's Tasks framework: its call, readable (when the excerpt is whole)
        call = None
        if not excerpt.cut:
            try:
                value = from_json(excerpt.text)
                call = describe_call(job.job_type, value if page.show_secrets else redact(value))
            except (ValueError, RecursionError):
                call = None  # (not JSON this page can parse: shown as stored)
        if call is None:
            return display.json_excerpt(excerpt, page.show_secrets)
        return format_html(
            "<p>Task call: <code>{}</code></p>{}",
            call,
            display.json_excerpt(excerpt, page.show_secrets),
        )

    @admin.display(description="result")
    def result_pretty(self, job: Job) -> SafeString | str:
        page = excerpts.page_of(job)
        excerpt = page.result
        return "-" if excerpt is None else display.json_excerpt(excerpt, page.show_secrets)

    @admin.display(description="payload, result, errors")
    def data_hidden(self, job: Job) -> str:
        return (
            "Hidden: seeing a job's payload, result, progress message, errors and tracebacks "
            f"needs the permission {conf.ADMIN_DATA_PERMISSION!r}."
        )

    @admin.display(description="related")
    def links(self, job: Job) -> SafeString | str:
        parts = []
        if job.parent_id:
            url = reverse("admin:django_pqjobs_job_change", args=[job.parent_id])
            parts.append(format_html('parent: <a href="{}">job {}</a>', url, job.parent_id))
        children = getattr(job, jobfacts.CHILDREN, [])
        if children:
            items = format_html_join(
                ", ",
                '<a href="{}">{}</a>',
                ((reverse("admin:django_pqjobs_job_change", args=[c]), c) for c in children),
            )
            parts.append(format_html("children: {}", items))
        if job.schedule_id:
            url = reverse("admin:django_pqjobs_schedule_change", args=[job.schedule_id])
            parts.append(format_html('schedule: <a href="{}">{}</a>', url, job.schedule_id))
        return format_html_join(mark_safe("<br>"), "{}", ((p,) for p in parts)) if parts else "-"

    @admin.display(description="batch")
    def member_of(self, job: Job) -> SafeString | str:
        return composition.batch_link(composition.links_of(job).batch)

    @admin.display(description="callback of")
    def callback_of_batch(self, job: Job) -> SafeString | str:
        return composition.batch_link(composition.links_of(job).callback_of)

    @admin.display(description="dependencies")
    def dependency_links(self, job: Job) -> SafeString | str:
        return composition.dependencies(job)

    @admin.display(description="dependents")
    def dependent_links(self, job: Job) -> SafeString | str:
        return composition.dependents(job)

    @admin.display(description="steps")
    def workflow_steps(self, job: Job) -> SafeString:
        """The durable workflow's steps, sleeps and waits (``ctx.step`` and the rest)."""
        page = excerpts.page_of(job)
        return workflow.steps_table(job, conf.DATABASE, page.show_data, page.show_secrets)

    @admin.display(description="timeline")
    def timeline(self, job: Job) -> SafeString:
        page = excerpts.page_of(job)
        rows = format_html_join(
            "",
            "<tr{}><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    mark_safe(' class="pqjobs-operator"') if e.operator else "",
                    display.moment(e.at),
                    e.what,
                    e.detail,
                )
                for e in timeline.entries(job, page, page.events)
            ),
        )
        return format_html('<table class="pqjobs-timeline">{}</table>{}', rows, _earlier(page))

    @admin.display(description="attempts")
    def attempt_table(self, job: Job) -> SafeString | str:
        """The attempts that did not succeed: failures, and the parks and snoozes a handler
        asked for (each named what it is)."""
        page = excerpts.page_of(job)
        if not page.attempts:
            return "-"
        rows = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            (
                (
                    a.attempt,
                    a.get_outcome_display(),
                    a.worker_id,
                    display.moment(a.started_at),
                    display.moment(a.finished_at),
                    a.error_type or "-",
                )
                for a in page.attempts
            ),
        )
        return format_html(
            '<div class="pqjobs-scroll"><table class="pqjobs-attempts"><thead><tr>'
            "<th>attempt</th><th>outcome</th><th>worker</th><th>started</th><th>finished</th>"
            "<th>error</th></tr></thead><tbody>{}</tbody></table></div>{}",
            rows,
            _earlier(page),
        )

    @admin.display(description="tracebacks")
    def tracebacks(self, job: Job) -> SafeString | str:
        """The tracebacks of the failed attempts (parks and snoozes have none)."""
        page = excerpts.page_of(job)
        failed = [a for a in page.attempts if a.outcome not in firstscreen.NOT_FAILURES]
        if not page.attempts:
            error = page.last_error
            if job.status == "done" or error is None or not error.length:
                return "-"
            return format_html('<div id="pqjobs-tracebacks">{}</div>', display.text_tail(error))
        return format_html(
            '<div id="pqjobs-tracebacks">{}{}</div>',
            _earlier(page),
            format_html_join(
                "",
                "<h4>attempt {} — {} ({})</h4>{}",
                (
                    (
                        a.attempt,
                        a.outcome,
                        a.error_type,
                        display.text_tail(
                            excerpts.Excerpt(
                                getattr(a, "traceback_tail", ""),
                                getattr(a, "traceback_length", 0),
                            )
                        ),
                    )
                    for a in failed
                ),
            ),
        )


def _earlier(page: excerpts.JobPage) -> SafeString | str:
    hidden = page.attempts_not_shown
    if hidden <= 0:
        return ""
    return format_html(
        '<p class="help">{} earlier attempt{} not shown (the page shows the latest {}).</p>',
        hidden,
        "" if hidden == 1 else "s",
        len(page.attempts),
    )
