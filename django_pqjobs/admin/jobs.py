"""Admin for jobs: list, filters, actions (Retry, Cancel, Run now, Delete, Release), job
page, dashboard (with flow control: Pause and Resume).

Every action is an operator action of ``operations.py``: one conditional statement of the
state machine (``transitions/``), so it never overwrites what a worker did meanwhile, and
a row of the audit trail under the user's name. Jobs in a status the action does not apply
to are reported as skipped. Nothing else writes a job: the job page is read-only and refuses
POST. The list is guarded (``changelist.py``), reads no result and no payload but a small
task's (its call), and the job page reads only excerpts of them (``excerpts.py``); who sees
that data at all is ``PQJOBS['ADMIN_DATA_PERMISSION']``. The job page links the job's
batch, the batch it is a callback of, its dependencies and its dependents
(``composition.py``), and the list filters by each of them.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count, Field, QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.views.decorators.http import require_POST

from .. import flow, monitoring, operations
from ..conf import conf
from ..errors import InvalidJobOption, PayloadError
from ..models import Dashboard, FairWeight, Job, JobAttempt, JobQuerySet, Step, WorkerRecord
from ..options import UNIQUE_STATE_BITS
from ..printable import counted
from ..redaction import may_see_secrets, redact
from ..registry import registry
from ..serialization import from_json
from ..statuses import FINISHED_STATUSES
from ..tasks.payload import describe_call
from ..workflows import send_signal
from . import (
    actions,
    composition,
    dashboard,
    display,
    excerpts,
    firstscreen,
    flowcontrol,
    pictures,
    reasons,
    timeline,
    workflow,
)
from .changelist import GuardedListAdmin
from .filters import (
    BatchFilter,
    CallbackOfFilter,
    DateFilter,
    DependenciesFilter,
    DependentsFilter,
    FinishedFilter,
    HasErrorFilter,
    JobTypeFilter,
    QueueFilter,
    SequenceFilter,
    StatusFilter,
)
from .pagination import EstimatedCountPaginator
from .search import HELP_TEXT, job_search
from .signal_form import SignalForm

TASK_CALL_CHARS = 80  # of a task's call in the list


def shows_data(request: HttpRequest) -> bool:
    """Whether this user may see payloads, results, progress messages and errors."""
    permission = conf.ADMIN_DATA_PERMISSION
    return permission is None or request.user.has_perm(permission)


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


def _job_or_404(rows: QuerySet[Any], pk: int) -> Job:
    # Hot first: were an id ever held twice (the database refuses a given id,
    # sql/schema/history.sql; a superuser may still make one), the page shows the job still
    # to run rather than answering 500.
    try:
        return cast(JobQuerySet, rows).get_hot_first(pk=pk)
    except Job.DoesNotExist:
        raise Http404("no such job") from None


@admin.register(Job)
class JobAdmin(GuardedListAdmin):
    # Narrow enough for a laptop beside the admin's side bars: the queue and priority sit
    # under the job type; the attempts, the worker, what holds a blocked job and the
    # progress under the status; the run-after, start or finish time (with the duration) in
    # one column; the last error takes the rest.
    list_display = [
        "id",
        "job_type_cell",
        "status_cell",
        "when",
        "error",
    ]
    list_display_links = ["id", "job_type_cell"]
    list_filter = [
        StatusFilter,
        SequenceFilter,
        QueueFilter,
        JobTypeFilter,
        HasErrorFilter,
        ("created_at", DateFilter),
        ("finished_at", FinishedFilter),
        # Shown only while applied: the batch and job pages link to them.
        BatchFilter,
        CallbackOfFilter,
        DependenciesFilter,
        DependentsFilter,
    ]
    # Each order is one an index serves: the primary key, and (job_type, id DESC).
    list_orderings = {
        "id": (["id"], ["-id"]),
        "job_type_cell": (["job_type", "-id"], ["-job_type", "id"]),
    }
    list_narrowing_hint = (
        "Narrow it with the status, job type or has-error filter, or search for a job id."
    )
    # Shows the search box; the search itself is job_search (every branch indexed).
    search_fields = ["=id"]
    search_help_text = HELP_TEXT
    ordering = ["-id"]
    list_per_page = 50
    show_full_result_count = False
    paginator = EstimatedCountPaginator
    actions = [
        "retry_action",
        "cancel_action",
        "run_now_action",
        "skip_action",
        "end_wait_action",
        "delete_action",
    ]
    change_form_template = "admin/django_pqjobs/job/change_form.html"
    change_list_template = "admin/django_pqjobs/job/change_list.html"
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "status_detail",
                    "job_type",
                    "queue",
                    "priority",
                    "tries",
                    "dedupe_key",
                    "key_held",
                    "sequence",
                    "fair",
                    "why_waiting",
                    "links",
                ]
            },
        ),
        (
            "Payload and result",
            {"fields": ["payload_pretty", "payload_shape", "result_pretty", "progress_bar"]},
        ),
        (
            "Timing",
            {
                "fields": [
                    "created",
                    "due",
                    "deadline",
                    "claimed",
                    "worker",
                    "heartbeat",
                    "finished",
                    "duration",
                    "timeout_seconds",
                    "cancel_requested",
                ]
            },
        ),
        ("Timeline", {"fields": ["timeline"]}),
        ("Errors", {"fields": ["attempt_table", "tracebacks"]}),
    ]
    # The job's batch and dependencies: a fieldset shown only with the rows that apply.
    composition_fields = ["member_of", "callback_of_batch", "dependency_links", "dependent_links"]
    # What replaces the job's data for staff without ADMIN_DATA_PERMISSION.
    hidden_data_fields = {
        "payload_pretty": "data_hidden",
        "result_pretty": None,
        "tracebacks": None,
    }

    # --- permissions: read-only; actions need the change permission -----------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A running job is never deleted: its worker would go on with a row that is gone.
        if obj is not None and getattr(obj, "status", None) == "running":
            return False
        return super().has_delete_permission(request, obj)

    def shows_data(self, request: HttpRequest) -> bool:
        """Whether this user may see payloads, results, progress messages and errors."""
        return shows_data(request)

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        """Only the rows that apply, the first screen answering the job's status
        (``firstscreen.plan``)."""
        if isinstance(obj, Job):
            return firstscreen.plan(obj, facts_of(obj))
        fieldsets: list[Any] = list(self.fieldsets)
        if not self.shows_data(request):
            hidden = self.hidden_data_fields
            fieldsets = []
            for name, spec in self.fieldsets:
                names = [hidden.get(str(f), str(f)) for f in spec["fields"]]
                fieldsets.append((name, {**spec, "fields": [f for f in names if f]}))
        return fieldsets

    def _composition_fields(self, job: Any) -> list[str]:
        if not isinstance(job, Job):
            return []
        links = composition.links_of(job)
        present = {
            "member_of": links.batch is not None,
            "callback_of_batch": links.callback_of is not None,
            "dependency_links": links.dependencies.total > 0,
            "dependent_links": links.dependents.total > 0,
        }
        return [name for name in self.composition_fields if present[name]]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return [f for _, spec in self.get_fieldsets(request, obj) for f in spec["fields"]]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        return [str(f) for f in self.get_fields(request, obj)]

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        if self.shows_data(request):
            return list(self.list_display)
        return ["error_type" if c == "error" else c for c in self.list_display]

    def list_rows(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return excerpts.list_rows(queryset, self.shows_data(request), may_see_secrets(request.user))

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Job | None:
        """The job of the job page, without its big columns, and their excerpts."""
        rows = self.get_queryset(request).defer(*excerpts.BIG_COLUMNS)
        field = Job._meta.get_field(from_field) if from_field else Job._meta.pk
        if not isinstance(field, Field):
            return None
        try:
            job = cast(JobQuerySet, rows).get_hot_first(**{field.name: field.to_python(object_id)})
        except (Job.DoesNotExist, ValidationError, ValueError):
            return None
        excerpts.attach(
            job,
            excerpts.load_page(
                rows.db, job.pk, self.shows_data(request), may_see_secrets(request.user)
            ),
        )
        composition.attach(job, composition.load_job_links(rows.db, job))
        _attach_facts(job, rows.db, self._composition_fields(job))
        setattr(job, _CAN_ACT, self.has_change_permission(request, job))
        return job

    def changeform_view(
        self,
        request: HttpRequest,
        object_id: str | None = None,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        # The page shows a job; it never writes one back. A save would put the whole row
        # as read back over whatever a worker recorded meanwhile.
        if request.method not in ("GET", "HEAD"):
            return HttpResponseNotAllowed(
                ["GET", "HEAD"],
                content="The job page is read-only: change a job with Retry, Cancel, Run "
                "now, Release or Delete.",
            )
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        raise PermissionDenied("jobs change only through the Retry, Cancel and Run now actions")

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django's bulk delete lists every selected job on its confirmation page (millions,
        # across a big list) and deletes running ones; delete_action does neither.
        # (Django 6.1 passes action_location and wants overrides to take it; 5.2 has none.)
        if action_location is None:
            found = super().get_actions(request)
        else:
            found = super().get_actions(request, action_location=action_location)  # type: ignore[call-arg]
        found.pop("delete_selected", None)
        return found

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet, search_term: str
    ) -> tuple[QuerySet, bool]:
        return job_search(queryset, search_term), False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = {"title": "Jobs", **(extra_context or {})}
        if request.method in ("GET", "HEAD"):
            extra["paused"] = _paused_rows(flow.paused(self.database_for(request)))
        return super().changelist_view(request, extra)

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        """The list, its running jobs' workers looked up once (one query by primary key,
        only when the page shows a running job): a stale worker is flagged in its row."""
        changelist = super().get_changelist_instance(request)
        if request.method in ("GET", "HEAD"):
            rows = list(changelist.result_list)  # read now; the page renders these rows
            names = [j.locked_by for j in rows if j.status == "running" and j.locked_by]
            if names:
                seen = firstscreen.workers_seen(
                    changelist.result_list.db, names, monitoring.live_after()
                )
                for job in rows:
                    if job.status == "running" and job.locked_by in seen:
                        setattr(job, _WORKER, seen[job.locked_by])
        return changelist

    # --- list columns ------------------------------------------------------------------------

    @admin.display(description="job type", ordering="job_type")
    def job_type_cell(self, job: Job) -> SafeString:
        """The job type (a task's path) on one line, never broken at its dots (cut short
        with its whole name on hover when the column is narrower); under it a task's call,
        then the queue and the priority."""
        priority = f" · priority {job.priority}" if job.priority else ""
        return format_html(
            '<span class="pqjobs-type" title="{}">{}</span>{}<span class="pqjobs-sub">{}{}</span>',
            job.job_type,
            job.job_type,
            _task_call(job),
            job.queue,
            priority,
        )

    @admin.display(description="status")
    def status_cell(self, job: Job) -> SafeString:
        lines = [f"attempts {job.attempts} / {job.max_attempts}"]
        if job.status == "blocked":
            lines.append(display.held_by(job.blocked_by, job.concurrency_key, job.rate_key))
        elif job.status == "waiting":
            lines.append(_waiting_for(job.waiting_for))
        elif job.status == "running":
            note = _worker_note(getattr(job, _WORKER, None))
            lines.append(
                format_html(
                    "on {}{}", job.locked_by or "-", format_html(" — {}", note) if note else ""
                )
            )
            if job.cancel_requested_at is not None:
                lines.append("cancel requested")
        bar = display.progress_bar(excerpts.progress_of(job)) if job.status == "running" else "-"
        return format_html(
            "{}{}{}",
            display.status_badge(job.status),
            format_html_join("", '<span class="pqjobs-sub">{}</span>', ((line,) for line in lines)),
            "" if bar == "-" else format_html('<span class="pqjobs-sub">{}</span>', bar),
        )

    @admin.display(description="attempts")
    def tries(self, job: Job) -> str:
        return f"{job.attempts} / {job.max_attempts}"

    @admin.display(description="key held")
    def key_held(self, job: Job) -> SafeString | str:
        """When the job holds its dedupe key: no other job of its type can have it then."""
        if not job.dedupe_key:
            return "-"
        finished = [name for name, bit in UNIQUE_STATE_BITS.items() if job.unique_states & bit]
        if len(finished) == len(UNIQUE_STATE_BITS):
            held = "in every status"
        else:
            held = "while " + ", ".join(["ready", "blocked", "running", *finished])
        if job.unique_until is None:
            return held
        return format_html("{}, until {} (unique_for)", held, display.moment(job.unique_until))

    @admin.display(description="when")
    def when(self, job: Job) -> SafeString | str:
        """Ready and blocked: when it is due; waiting: after its dependencies, or (a parked
        workflow) when it wakes; running: since when; finished: when, and how long it ran."""
        if job.status == "running":
            return display.moment_lines(job.locked_at, "started")
        if job.finished_at is not None and job.status in FINISHED_STATUSES:
            took = display.duration(job.duration_ms) if job.duration_ms is not None else ""
            return display.moment_lines(job.finished_at, after=f"took {took}" if took else "")
        if job.status == "waiting" and job.waiting_for == 0:
            return display.moment_lines(job.run_after, "wakes")
        if job.status == "waiting":
            return "after its dependencies"
        return display.moment_lines(job.run_after, "due")

    @admin.display(description="duration")
    def duration(self, job: Job) -> str:
        return display.duration(job.duration_ms)

    @admin.display(description="last error")
    def error(self, job: Job) -> SafeString | str:
        return display.error_summary(
            getattr(job, "error_head", None), getattr(job, "error_tail", None)
        )

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> SafeString | str:
        return display.progress_bar(excerpts.progress_of(job))

    # --- job page ----------------------------------------------------------------------------

    @admin.display(description="status")
    def status_detail(self, job: Job) -> SafeString:
        """The status, since when, and (blocked) what holds the job back."""
        since = {
            "running": job.locked_at,
            "done": job.finished_at,
            "failed": job.finished_at,
            "cancelled": job.finished_at,
            "expired": job.finished_at,
        }.get(job.status, job.updated_at)
        extra: SafeString | str = ""
        if job.status == "blocked":
            extra = format_html(
                " — held back by the {}",
                display.held_by(job.blocked_by, job.concurrency_key, job.rate_key),
            )
        elif job.status == "waiting":
            extra = f" — {_waiting_for(job.waiting_for)}"
        elif job.status == "running" and job.cancel_requested_at is not None:
            extra = " — cancel requested"
        return format_html(
            "{} since {}{}", display.status_badge(job.status), display.moment(since), extra
        )

    @admin.display(description="sequence")
    def sequence(self, job: Job) -> SafeString | str:
        """The job's sequence, and whether it halts it (failed, with jobs waiting on it)."""
        if not job.sequence_key:
            return "-"
        halted = job.status == "failed" and job.has_dependents
        return format_html(
            "{}{}",
            job.sequence_key,
            " — halted here: the rest of the sequence waits until this job is retried "
            "(and succeeds) or skipped"
            if halted
            else "",
        )

    @admin.display(description="fair key")
    def fair(self, job: Job) -> SafeString | str:
        """The key workers share the job's turns out by, its weight, and (while it waits
        with one) its turn."""
        if not job.fair_key:
            return "-"
        weight = (
            FairWeight.objects.using(conf.DATABASE)
            .filter(key=job.fair_key)
            .values_list("weight", flat=True)
            .first()
        )
        turn = (
            f"; turn {job.fair_turn:g} (among due jobs of its priority, the lowest turn is "
            "claimed first)"
            if job.fair_turn is not None
            else ""
        )
        return format_html(
            '{} — weight {}{} (<a href="{}">fair keys</a>)',
            job.fair_key,
            weight or 1,
            turn,
            reverse("admin:django_pqjobs_fairweight_changelist"),
        )

    @admin.display(description="payload version")
    def payload_shape(self, job: Job) -> str:
        """The version of its type's payload shape the payload was written for, and what the
        worker makes of it (see @job(version=, upgrade=))."""
        written = job.payload_version or 1
        known = registry.resolve(job.job_type)
        current = (known.version or 1) if known is not None else None
        if current is None or written == current:
            return str(written)
        if written < current:
            return f"{written} — older than the type's {current}: upgraded before its handler runs"
        return f"{written} — newer than this code's {current}: left for workers of newer code"

    @admin.display(description="why it waits")
    def why_waiting(self, job: Job) -> SafeString | str:
        """What stands between the job and its next attempt (nothing: "-")."""
        found = getattr(job, _REASONS, None)
        return reasons.as_lines(reasons.why(job, conf.DATABASE) if found is None else found)

    @admin.display(description="deadline")
    def deadline(self, job: Job) -> SafeString | str:
        if job.expires_at is None:
            return "-"
        return format_html("{} (no attempt starts after it)", display.moment(job.expires_at))

    @admin.display(description="created")
    def created(self, job: Job) -> SafeString | str:
        return display.moment(job.created_at)

    @admin.display(description="run after")
    def due(self, job: Job) -> SafeString | str:
        return display.moment(job.run_after)

    @admin.display(description="claimed (last attempt)")
    def claimed(self, job: Job) -> SafeString | str:
        return display.moment(job.locked_at)

    @admin.display(description="worker")
    def worker(self, job: Job) -> SafeString | str:
        if not job.locked_by:
            return "-"
        if job.status != "running":
            return format_html("{} (ran its last attempt)", job.locked_by)
        note = _worker_note(getattr(job, _WORKER, None))
        if note:
            return format_html("{} (its attempt; {})", job.locked_by, note)
        return format_html("{} (runs it now)", job.locked_by)

    @admin.display(description="worker")
    def worker_state(self, job: Job) -> SafeString | str:
        """Which worker runs the job, and whether it is live: a stale (or gone) worker says
        for how long and its heartbeat's age, with Release beside it."""
        worker: firstscreen.WorkerSeen | None = getattr(job, _WORKER, None)
        name = job.locked_by or "-"
        if worker is None or worker.live:
            age = "" if worker is None else f" (heartbeat {worker.heartbeat_age:.0f} s ago)"
            return format_html("{} runs it now{}", name, age)
        release = (
            format_html(
                ' <a class="button pqjobs-release" href="{}">Release…</a>',
                reverse("admin:django_pqjobs_job_release", args=[job.pk]),
            )
            if getattr(job, _CAN_ACT, False)
            else ""
        )
        rescue = (
            f"Workers rescue its attempt once the heartbeat is {conf.STALE_TIMEOUT:g} s old "
            "(STALE_TIMEOUT); Release gives it back now."
        )
        if worker.heartbeat_age is None:
            return format_html(
                '<strong class="pqjobs-stale-worker">{} is gone</strong>: it has no worker '
                "record (it stopped, or was rescued). {}{}",
                name,
                rescue,
                release,
            )
        return format_html(
            '<strong class="pqjobs-stale-worker">worker stale for {} s</strong>: {} last '
            'heartbeated {} s ago (live workers: within {} s). <span class="pqjobs-sub">{}'
            "</span>{}",
            f"{worker.stale_for or 0:.0f}",
            name,
            f"{worker.heartbeat_age:.0f}",
            f"{worker.live_after:g}",
            rescue,
            release,
        )

    @admin.display(description="last heartbeat")
    def heartbeat(self, job: Job) -> SafeString | str:
        return display.moment(job.heartbeat_at)

    @admin.display(description="finished")
    def finished(self, job: Job) -> SafeString | str:
        return display.moment(job.finished_at)

    @admin.display(description="cancel requested")
    def cancel_requested(self, job: Job) -> SafeString | str:
        return display.moment(job.cancel_requested_at)

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
            if facts_of(job).has_traceback
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
        pauses: list[flow.Paused] = getattr(job, _PAUSES, [])
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
        children = getattr(job, _CHILDREN, [])
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

    # --- bulk actions --------------------------------------------------------------------------

    def _bulk(self, request: HttpRequest, queryset: QuerySet, name: str) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        action = actions.ACTIONS[name]
        changed = action.run(ids, actions.actor(request))
        level = messages.SUCCESS if changed else messages.WARNING
        self.message_user(request, action.report(changed, len(ids)), level)

    @admin.action(
        description="Retry selected jobs (failed / cancelled / expired)", permissions=["change"]
    )
    def retry_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "retry")

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "cancel")

    @admin.action(
        description="Run selected ready jobs now (first in the queue)", permissions=["change"]
    )
    def run_now_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "run-now")

    @admin.action(
        description="Skip selected failed jobs (a halted sequence goes on)",
        permissions=["change"],
    )
    def skip_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "skip")

    @admin.action(description="End the durable wait of selected workflows", permissions=["change"])
    def end_wait_action(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._bulk(request, queryset, "end-wait")

    @admin.action(description="Delete selected jobs (not running)", permissions=["delete"])
    def delete_action(self, request: HttpRequest, queryset: QuerySet) -> HttpResponse | None:
        """Asks first on a page that counts the selection by status (never lists it), then
        deletes all but the running jobs, in batches."""
        if request.POST.get("post") == "yes":
            result = actions.delete_selected(queryset, actions.actor(request))
            text = f"{counted(result.deleted, 'job')} deleted."
            if result.skipped:
                text += f" {result.skipped} skipped: running jobs are not deleted."
            level = messages.SUCCESS if result.deleted else messages.WARNING
            self.message_user(request, text, level)
            return None
        by_status = dict(
            queryset.order_by()
            .values_list("status")
            .annotate(n=Count("pk"))
            .values_list("status", "n")
        )
        context = {
            **self.admin_site.each_context(request),
            "title": "Delete jobs?",
            "opts": self.model._meta,
            "by_status": sorted(by_status.items()),
            "total": sum(by_status.values()),
            "running": by_status.get("running", 0),
            "doomed": sum(n for status, n in by_status.items() if status != "running"),
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "select_across": request.POST.get("select_across", "0"),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "query_string": request.META.get("QUERY_STRING", ""),
        }
        return TemplateResponse(
            request, "admin/django_pqjobs/job/delete_selected_confirmation.html", context
        )

    # --- the job page's delete (one job, never a running one) -------------------------------

    def delete_view(
        self, request: HttpRequest, object_id: str, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        status = (
            self.get_queryset(request)
            .filter(pk=_pk(object_id))
            .values_list("status", flat=True)
            .first()
        )
        if status == "running":
            self.message_user(
                request,
                f"Job {object_id} is running and is not deleted: cancel it (or release it, if "
                "its worker is stuck) first.",
                messages.ERROR,
            )
            return HttpResponseRedirect(_change_url(object_id))
        return super().delete_view(request, object_id, extra_context)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[str, int], set[str], list[Any]]:
        """What the delete page says goes: the job and how many attempts of its history
        (counted, not listed: a job can have thousands)."""
        jobs = list(objs)
        ids = [job.pk for job in jobs]
        attempts = JobAttempt.objects.using(conf.DATABASE).filter(job_id__in=ids)
        count = attempts.count()
        listed: list[Any] = [
            format_html("Job {}: {} ({})", job.pk, job.job_type, job.status) for job in jobs
        ]
        if count:
            listed.append([f"{counted(count, 'attempt')} of its history"])
        model_count = {"jobs": len(jobs), "attempts of their history": count}
        perms_needed: set[str] = set()
        if not self.has_delete_permission(request):
            perms_needed.add("job")
        return listed, model_count, perms_needed, []

    def log_deletions(self, request: HttpRequest, queryset: Any) -> list[Any]:
        # The audit trail records every delete that happened (delete_model); Django's log
        # would be written before the delete and record a refused one too.
        return []

    def delete_model(self, request: HttpRequest, obj: Any) -> None:
        deleted = operations.delete_jobs([obj.pk], by=actions.actor(request), using=conf.DATABASE)
        if not deleted:
            request._pqjobs_delete_refused = True  # type: ignore[attr-defined]

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        actions.delete_selected(queryset, actions.actor(request))

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        if getattr(request, "_pqjobs_delete_refused", False):
            self.message_user(
                request,
                f"Job {obj_id} was not deleted: a worker claimed it meanwhile, and running "
                "jobs are not deleted.",
                messages.ERROR,
            )
            return HttpResponseRedirect(_change_url(obj_id))
        return super().response_delete(request, obj_display, obj_id)

    # --- the job page's buttons --------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        own = [
            path(
                "dashboard/",
                self.admin_site.admin_view(self.dashboard_view),
                name="django_pqjobs_job_dashboard",
            ),
            path(
                "dashboard/<str:verb>/",
                self.admin_site.admin_view(self.pause_view),
                name="django_pqjobs_job_pause",
            ),
            path(
                "<int:job_id>/action/<str:action>/",
                self.admin_site.admin_view(self.object_action),
                name="django_pqjobs_job_action",
            ),
            path(
                "<int:job_id>/release/",
                self.admin_site.admin_view(self.release_view),
                name="django_pqjobs_job_release",
            ),
            path(
                "<int:job_id>/signal/",
                self.admin_site.admin_view(self.signal_view),
                name="django_pqjobs_job_signal",
            ),
        ]
        return own + super().get_urls()

    def object_action(self, request: HttpRequest, job_id: int, action: str) -> HttpResponse:
        """The Retry / Cancel / Run now buttons of a job's page (POST, CSRF-protected)."""
        if action not in actions.ACTIONS:
            raise PermissionDenied
        return require_POST(self._object_action)(request, job_id, action)

    def _object_action(self, request: HttpRequest, job_id: int, action: str) -> HttpResponse:
        job = _job_or_404(self.get_queryset(request).only("pk"), pk=job_id)
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        changed = actions.ACTIONS[action].run([job.pk], actions.actor(request))
        level = messages.SUCCESS if changed else messages.WARNING
        self.message_user(request, actions.job_page_message(action, job.pk, bool(changed)), level)
        return HttpResponseRedirect(_change_url(job.pk))

    def release_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        """Release one stuck running attempt: a page that shows what is released (GET), and
        the release itself (POST, with the attempt the page showed)."""
        job = _job_or_404(self.get_queryset(request).defer(*excerpts.BIG_COLUMNS), pk=job_id)
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        if request.method == "POST":
            try:
                attempt = int(request.POST.get("attempt", ""))
            except ValueError:
                attempt = -1
            worker_id = request.POST.get("worker", "")
            status = operations.release_job(
                job.pk,
                worker_id=worker_id,
                attempt=attempt,
                by=actions.actor(request),
                using=conf.DATABASE,
            )
            if status is None:
                self.message_user(
                    request,
                    f"Job {job.pk} was not released: attempt {attempt} on worker "
                    f"{worker_id} is no longer running (it finished, or was rescued or "
                    "released meanwhile).",
                    messages.WARNING,
                )
            else:
                self.message_user(
                    request,
                    f"Job {job.pk}: attempt {attempt} on worker {worker_id} released, the job "
                    f"is {status} now. Whatever that worker still records is ignored.",
                    messages.SUCCESS,
                )
            return HttpResponseRedirect(_change_url(job.pk))
        if job.status != "running" or not job.locked_by:
            self.message_user(
                request, f"Job {job.pk} is {job.status}: only running jobs are released."
            )
            return HttpResponseRedirect(_change_url(job.pk))
        live = (
            WorkerRecord.objects.using(conf.DATABASE)
            .filter(worker_id=job.locked_by)
            .values_list("heartbeat_at", flat=True)
            .first()
        )
        context = {
            **self.admin_site.each_context(request),
            "title": f"Release job {job.pk}?",
            "opts": self.model._meta,
            "job": job,
            "claimed": display.moment(job.locked_at),
            "heartbeat": display.moment(job.heartbeat_at),
            "worker_heartbeat": display.moment(live) if live else None,
            "stale_timeout": conf.STALE_TIMEOUT,
        }
        return TemplateResponse(request, "admin/django_pqjobs/job/release.html", context)

    def signal_view(self, request: HttpRequest, job_id: int) -> HttpResponse:
        """Send a workflow a signal (its ``ctx.wait_for_signal`` returns the payload): a
        form (GET), and the signal sent under the user's name (POST)."""
        job = _job_or_404(self.get_queryset(request).defer(*excerpts.BIG_COLUMNS), pk=job_id)
        if not self.has_change_permission(request, job):
            raise PermissionDenied
        waiting_for = list(
            Step.objects.using(conf.DATABASE)
            .filter(job_id=job.pk, kind="signal", finished_at__isnull=True)
            .values_list("name", flat=True)
        )
        form = SignalForm(
            request.POST if request.method == "POST" else None,
            initial={"name": waiting_for[0]} if waiting_for else None,
        )
        if request.method == "POST" and form.is_valid():
            name, payload = form.cleaned_data["name"], form.cleaned_data["payload"]
            try:
                sent = send_signal(
                    job.pk, name, payload, by=actions.actor(request), using=conf.DATABASE
                )
            except (PayloadError, InvalidJobOption) as exc:
                form.add_error("payload", str(exc))
            else:
                text = (
                    f"Signal {name!r} sent to job {job.pk}."
                    if sent
                    else f"Job {job.pk} already had a signal {name!r}: the first one stands."
                )
                self.message_user(request, text, messages.SUCCESS if sent else messages.WARNING)
                return HttpResponseRedirect(_change_url(job.pk))
        context = {
            **self.admin_site.each_context(request),
            "title": f"Send job {job.pk} a signal",
            "opts": self.model._meta,
            "job": job,
            "form": form,
            "waiting_for": waiting_for,
        }
        return TemplateResponse(request, "admin/django_pqjobs/job/signal.html", context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        extra["can_act"] = self.has_change_permission(request)
        extra["title"] = "View job"
        return super().change_view(request, object_id, form_url, extra)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> HttpResponse:
        context["can_delete_job"] = obj is not None and self.has_delete_permission(request, obj)
        if isinstance(obj, Job):
            context.update(pictures.job_pictures(obj, conf.DATABASE))
        return super().render_change_form(request, context, add, change, form_url, obj)

    # --- the dashboard, and Pause / Resume ---------------------------------------------------

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        alias = conf.READ_DATABASE  # the dashboard decides nothing: it may read a replica
        paused = flow.paused(alias)
        numbers = dashboard.collect(alias, frozenset(p.name for p in paused if p.kind == "queue"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Job queue dashboard",
            "opts": self.model._meta,
            "dashboard": numbers,
            "flow": flowcontrol.collect(
                alias, paused, sorted({a["queue"] for a in numbers.active})
            ),
            "paused": _paused_rows(paused),
            "can_change": self.has_change_permission(request),
            "pause_kinds": list(flowcontrol.KINDS.items()),
            "fair_keys_url": self._fair_keys_url(request),
            "stale_timeout": conf.STALE_TIMEOUT,
            "live_after": monitoring.live_after(),
            **pictures.dashboard_pictures(
                numbers.active, reverse("admin:django_pqjobs_job_changelist")
            ),
        }
        return TemplateResponse(request, "admin/django_pqjobs/job/dashboard.html", context)

    def _fair_keys_url(self, request: HttpRequest) -> str | None:
        """The Fair keys page (the weights' list), for users who may see it."""
        site = self.admin_site
        if not site.is_registered(FairWeight):
            return None
        if not site.get_model_admin(FairWeight).has_view_permission(request):
            return None
        return reverse(f"{site.name}:django_pqjobs_fairweight_changelist")

    def pause_view(self, request: HttpRequest, verb: str) -> HttpResponse:
        """The dashboard's Pause and Resume buttons (POST, CSRF-protected, change
        permission)."""
        if verb not in ("pause", "resume"):
            raise PermissionDenied
        return require_POST(self._pause)(request, verb)

    def _pause(self, request: HttpRequest, verb: str) -> HttpResponse:
        if not self.has_change_permission(request):
            raise PermissionDenied
        text, level = flowcontrol.pause_or_resume(request, verb == "pause", actions.actor(request))
        self.message_user(request, text, level)
        return HttpResponseRedirect(reverse("admin:django_pqjobs_job_dashboard"))


@admin.register(Dashboard)
class DashboardAdmin(admin.ModelAdmin):
    """The dashboard's entry in the admin's index and navigation sidebar (``Dashboard``, a
    proxy of Job): its one page is the dashboard, shown to whoever may view jobs."""

    def _jobs(self) -> JobAdmin:
        return cast(JobAdmin, self.admin_site.get_model_admin(Job))

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._jobs().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and self._jobs().has_view_permission(request)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_urls(self) -> list[URLPattern]:
        return [
            path(
                "",
                self.admin_site.admin_view(self.changelist_view),
                name="django_pqjobs_dashboard_changelist",
            )
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        return self._jobs().dashboard_view(request)


def _task_call(job: Job) -> SafeString | str:
    """``send_receipt(42, to="a@example.com")`` for a task job whose payload the list read
    (see ``excerpts.task_call_payload``), else nothing."""
    text = getattr(job, "task_payload", None)
    if not text:
        return ""
    try:
        value = from_json(text)
        if getattr(job, "mask_secrets", False):
            value = redact(value)
        call = describe_call(job.job_type, value, limit=TASK_CALL_CHARS)
    except (ValueError, RecursionError):
        return ""  # not JSON this page can parse
    return format_html('<span class="pqjobs-sub pqjobs-call">{}</span>', call) if call else ""


def _has_error(job: Any) -> bool:
    """Whether the job's row records an error (its last attempt's, or why it expired)."""
    if not isinstance(job, Job):
        return False
    error = excerpts.page_of(job).last_error
    return bool(job.error_type or (error is not None and error.length))


_FACTS = "_pqjobs_facts"
_REASONS = "_pqjobs_reasons"
_CHILDREN = "_pqjobs_children"
_WORKER = "_pqjobs_worker"
_PAUSES = "_pqjobs_pauses"
_CAN_ACT = "_pqjobs_can_act"  # the user may Retry, Cancel, Release... it
CHILDREN_SHOWN = 20


def _attach_facts(job: Job, alias: str, composed: list[str]) -> None:
    """Read what the job page shows besides the job's row (why it waits, its children, the
    liveness of its worker, the pauses an expired job met) and what decides its rows."""
    page = excerpts.page_of(job)
    why = reasons.why(job, alias)
    setattr(job, _REASONS, why)
    # Served by the partial index on parent_id (pqjobs_job_parent); children are
    # enqueued after their parent, so only ids above it are looked at.
    children = list(
        Job.objects.using(alias)
        .filter(parent_id=job.pk, pk__gt=job.pk)
        .order_by("pk")
        .values_list("pk", flat=True)[:CHILDREN_SHOWN]
    )
    setattr(job, _CHILDREN, children)
    worker = None
    if job.status == "running" and job.locked_by:
        seen = firstscreen.workers_seen(alias, [job.locked_by], monitoring.live_after())
        worker = seen.get(job.locked_by)
        setattr(job, _WORKER, worker)
    if job.status == "expired":
        setattr(job, _PAUSES, flow.paused(alias))
    failures = [a for a in page.attempts if a.outcome not in firstscreen.NOT_FAILURES]
    error = page.last_error
    # A one-line last error (why a job expired, a timeout) has no traceback to show.
    multi_line = error is not None and (error.cut > 0 or "\n" in error.text.strip())
    has_traceback = bool(
        (multi_line and not page.attempts)
        or any(getattr(a, "traceback_length", 0) for a in failures)
    )
    known = registry.resolve(job.job_type)
    current = (known.version or 1) if known is not None else None
    setattr(
        job,
        _FACTS,
        firstscreen.Facts(
            shows_data=page.show_data,
            has_error=_has_error(job),
            has_traceback=has_traceback,
            has_steps=page.has_steps,
            has_payload=page.payload is not None,
            has_result=page.result is not None,
            has_progress=page.progress is not None,
            waits_because=bool(why),
            has_related=bool(job.parent_id or job.schedule_id or children),
            attempts=page.attempts_total,
            failures=len(failures),
            payload_upgrade=current is not None and (job.payload_version or 1) != current,
            composed=composed,
            worker=worker,
        ),
    )


def facts_of(job: Job) -> firstscreen.Facts:
    """The :class:`firstscreen.Facts` the job page read (defaults if none were read)."""
    facts = getattr(job, _FACTS, None)
    return facts if isinstance(facts, firstscreen.Facts) else firstscreen.Facts()


def _worker_note(worker: firstscreen.WorkerSeen | None) -> SafeString | str:
    """``stale for 80 s (last heartbeat 95 s ago)``: a running job's worker, when it is not
    live ("" when it is, or was not looked at)."""
    if worker is None or worker.live:
        return ""
    if worker.heartbeat_age is None:
        return format_html('<span class="pqjobs-stale-worker">{}</span>', "worker gone")
    return format_html(
        '<span class="pqjobs-stale-worker">worker stale for {} s</span>',
        f"{worker.stale_for or 0:.0f}",
    )


def _waiting_for(count: int) -> str:
    if count == 0:
        return "parked: a workflow's durable sleep or wait for a signal"
    return f"waiting for {count} {'dependency' if count == 1 else 'dependencies'}"


def _paused_rows(paused: list[flow.Paused]) -> list[dict[str, Any]]:
    return [
        {
            "kind": p.kind,
            "kind_label": flowcontrol.KINDS.get(p.kind, p.kind),
            "name": p.name,
            "by": p.paused_by,
            "since": display.moment(p.paused_at),
        }
        for p in paused
    ]


def _pk(object_id: Any) -> int | None:
    try:
        return int(object_id)
    except (TypeError, ValueError):
        return None


def _change_url(job_id: Any) -> str:
    return reverse("admin:django_pqjobs_job_change", args=[job_id])
