"""The job page's fields of the job itself: its status and what holds it, its attempts,
keys (dedupe, sequence, fair), payload version, why it waits, its times, its worker (live,
stale or gone, with Release) and its progress. Each reads the job's row and what
``jobfacts.py`` attached to it; the job page (``jobpage.py``) picks which it shows."""

from __future__ import annotations

from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..conf import conf
from ..models import FairWeight, Job
from ..options import UNIQUE_STATE_BITS
from ..registry import registry
from . import display, excerpts, firstscreen, jobfacts, reasons


class JobPageFields(admin.ModelAdmin):
    """The job page's fields of the job's state, keys and times."""

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
            extra = f" — {jobfacts.waiting_for(job.waiting_for)}"
        elif job.status == "running" and job.cancel_requested_at is not None:
            extra = " — cancel requested"
        return format_html(
            "{} since {}{}", display.status_badge(job.status), display.moment(since), extra
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
        found = getattr(job, jobfacts.REASONS, None)
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
        note = jobfacts.worker_note(getattr(job, jobfacts.WORKER, None))
        if note:
            return format_html("{} (its attempt; {})", job.locked_by, note)
        return format_html("{} (runs it now)", job.locked_by)

    @admin.display(description="worker")
    def worker_state(self, job: Job) -> SafeString | str:
        """Which worker runs the job, and whether it is live: a stale (or gone) worker says
        for how long and its heartbeat's age, with Release beside it."""
        worker: firstscreen.WorkerSeen | None = getattr(job, jobfacts.WORKER, None)
        name = job.locked_by or "-"
        if worker is None or worker.live:
            age = "" if worker is None else f" (heartbeat {worker.heartbeat_age:.0f} s ago)"
            return format_html("{} runs it now{}", name, age)
        release = (
            format_html(
                ' <a class="button pqjobs-release" href="{}">Release…</a>',
                reverse("admin:django_pqjobs_job_release", args=[job.pk]),
            )
            if getattr(job, jobfacts.CAN_ACT, False)
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

    @admin.display(description="duration")
    def duration(self, job: Job) -> str:
        return display.duration(job.duration_ms)

    @admin.display(description="progress")
    def progress_bar(self, job: Job) -> SafeString | str:
        return display.progress_bar(excerpts.progress_of(job))
