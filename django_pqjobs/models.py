"""Tables: Job (one row per job), JobAttempt (failure history), WorkerRecord (live workers),
Schedule (recurring jobs).

Status changes are not made here: they live in ``worker/queries.py`` (the state machine),
so that every transition can be read in one place.
"""

from __future__ import annotations

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Now


class JobStatus(models.TextChoices):
    READY = "ready", "Ready"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"


ACTIVE_STATUSES = (JobStatus.READY, JobStatus.RUNNING)
FINISHED_STATUSES = (JobStatus.DONE, JobStatus.FAILED, JobStatus.CANCELLED)


class JobQuerySet(models.QuerySet["Job"]):
    def ready(self) -> JobQuerySet:
        return self.filter(status=JobStatus.READY)

    def due(self) -> JobQuerySet:
        return self.ready().filter(run_after__lte=Now())

    def running(self) -> JobQuerySet:
        return self.filter(status=JobStatus.RUNNING)

    def active(self) -> JobQuerySet:
        return self.filter(status__in=ACTIVE_STATUSES)

    def done(self) -> JobQuerySet:
        return self.filter(status=JobStatus.DONE)

    def failed(self) -> JobQuerySet:
        return self.filter(status=JobStatus.FAILED)

    def cancelled(self) -> JobQuerySet:
        return self.filter(status=JobStatus.CANCELLED)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED_STATUSES)


class Job(models.Model):
    """One job. History stays in the table until pruned (see ``PQJOBS['RETENTION']``)."""

    id = models.BigAutoField(primary_key=True)
    job_type = models.CharField(max_length=200)
    queue = models.CharField(max_length=100, default="default", db_default="default")
    payload = models.JSONField(encoder=DjangoJSONEncoder, default=dict)
    status = models.CharField(
        max_length=16, choices=JobStatus.choices, default=JobStatus.READY, db_default="ready"
    )
    priority = models.IntegerField(default=0, db_default=0, help_text="Higher runs first.")
    attempts = models.IntegerField(default=0, db_default=0)
    max_attempts = models.IntegerField(default=5, db_default=5)
    run_after = models.DateTimeField(db_default=Now())
    timeout_seconds = models.FloatField(null=True, blank=True)
    locked_at = models.DateTimeField(null=True, blank=True)
    locked_by = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    # NULL, not "", means "no dedupe": the partial unique index skips NULLs.
    dedupe_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    last_error = models.TextField(blank=True, default="", db_default="")
    error_type = models.CharField(max_length=200, blank=True, default="", db_default="")
    result = models.JSONField(encoder=DjangoJSONEncoder, null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.BigIntegerField(null=True, blank=True)
    progress = models.JSONField(null=True, blank=True)
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    parent = models.ForeignKey(
        "self",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="children",
        help_text="The job whose handler enqueued this one.",
    )
    schedule = models.ForeignKey(
        "Schedule",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        db_constraint=False,
        db_index=False,
        related_name="jobs",
        help_text="The schedule that enqueued this job, if any.",
    )
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    objects = JobQuerySet.as_manager()

    class Meta:
        db_table = "pqjobs_job"
        ordering = ["-id"]
        indexes = [
            # Serves the claim query's WHERE and ORDER BY exactly: claiming reads only ready
            # rows, however many finished rows the table holds.
            models.Index(
                F("priority").desc(),
                "run_after",
                "id",
                condition=Q(status="ready"),
                name="pqjobs_job_claim",
            ),
            models.Index("heartbeat_at", condition=Q(status="running"), name="pqjobs_job_running"),
            models.Index(
                "finished_at",
                condition=Q(status__in=["done", "failed", "cancelled"]),
                name="pqjobs_job_finished",
            ),
            # The admin's job type filter (newest first) and its choices (a loose index
            # scan). Every full index costs each status change (no update is HOT: status is
            # in the partial indexes' predicates), so the other admin indexes are partial:
            # they hold only the rare rows they serve.
            models.Index("job_type", F("id").desc(), name="pqjobs_job_type_id"),
            models.Index(F("id").desc(), condition=Q(status="failed"), name="pqjobs_job_failed"),
            models.Index(F("id").desc(), condition=~Q(last_error=""), name="pqjobs_job_has_error"),
            models.Index("parent", condition=Q(parent__isnull=False), name="pqjobs_job_parent"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["job_type", "dedupe_key"],
                condition=Q(status__in=["ready", "running"]) & Q(dedupe_key__isnull=False),
                name="pqjobs_job_active_dedupe",
            ),
            models.CheckConstraint(
                condition=Q(status__in=["ready", "running", "done", "failed", "cancelled"]),
                name="pqjobs_job_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="pqjobs_job_max_attempts"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} #{self.id} ({self.status})"


class AttemptOutcome(models.TextChoices):
    ERROR = "error", "Error (retryable)"
    PERMANENT = "permanent", "Permanent error"
    TIMEOUT = "timeout", "Timed out"
    UNKNOWN_TYPE = "unknown_type", "No handler registered"
    LOST = "lost", "Worker lost (rescued)"
    RELEASED = "released", "Released at shutdown"
    CANCELLED = "cancelled", "Cancelled while running"
    KILLED = "killed", "Process killed (likely out of memory)"
    CRASHED = "crashed", "Process crashed (signal)"
    EXITED = "exited", "Process exited early"


class JobAttempt(models.Model):
    """One attempt of a job that did not succeed. Every failure is kept, not only the last."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="failed_attempts")
    attempt = models.IntegerField()
    worker_id = models.CharField(max_length=200, blank=True, default="")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(db_default=Now())
    outcome = models.CharField(max_length=16, choices=AttemptOutcome.choices)
    error_type = models.CharField(max_length=200, blank=True, default="")
    traceback = models.TextField(blank=True, default="")

    class Meta:
        db_table = "pqjobs_attempt"
        indexes = [models.Index("finished_at", name="pqjobs_attempt_finished")]
        ordering = ["job_id", "attempt", "id"]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.outcome}"


class WorkerRecord(models.Model):
    """A running ``run_jobs`` (or embedded) worker; its heartbeat shows it is alive."""

    worker_id = models.CharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    queues = models.JSONField(null=True, blank=True, help_text="null means every queue")
    concurrency = models.IntegerField(default=1)
    started_at = models.DateTimeField(db_default=Now())
    heartbeat_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "pqjobs_worker"
        ordering = ["worker_id"]

    def __str__(self) -> str:
        return self.worker_id


class OverlapPolicy(models.TextChoices):
    SKIP = "skip", "Skip a run while the previous one is ready or running"
    ALLOW = "allow", "Allow overlapping runs"


class MisfirePolicy(models.TextChoices):
    RUN_ONCE = "run_once", "Run once now, then resume the schedule"
    SKIP = "skip", "Skip missed runs; wait for the next one"


class Schedule(models.Model):
    """A recurring job: a cron expression or a fixed interval (see ``schedules/timing.py``).

    ``declared`` holds what the code (``@job(cron=...)`` or ``PQJOBS['SCHEDULES']``) last
    declared; it is NULL for schedules created in the admin. Syncing updates a field only
    when the code changed that field, so admin edits of the others are kept.
    """

    name = models.CharField(max_length=200, unique=True)
    job_type = models.CharField(max_length=200)
    payload = models.JSONField(encoder=DjangoJSONEncoder, default=dict, blank=True)
    queue = models.CharField(
        max_length=100, blank=True, default="", help_text="Blank: the job type's queue."
    )
    priority = models.IntegerField(
        null=True, blank=True, help_text="Blank: the job type's priority. Higher runs first."
    )
    cron = models.CharField(
        max_length=200,
        blank=True,
        default="",
        help_text="5 fields (minute hour day month weekday), or 6 with seconds last.",
    )
    interval_seconds = models.FloatField(
        null=True, blank=True, help_text="Run every N seconds (instead of cron)."
    )
    timezone = models.CharField(
        max_length=64, default="UTC", help_text="IANA name the cron fields are read in."
    )
    enabled = models.BooleanField(default=True)
    overlap = models.CharField(
        max_length=16, choices=OverlapPolicy.choices, default=OverlapPolicy.SKIP
    )
    misfire = models.CharField(
        max_length=16, choices=MisfirePolicy.choices, default=MisfirePolicy.RUN_ONCE
    )
    next_run_at = models.DateTimeField(null=True, blank=True)
    last_run_at = models.DateTimeField(null=True, blank=True)
    last_job = models.ForeignKey(
        Job,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
        help_text="May point to a pruned job.",
    )
    declared = models.JSONField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "pqjobs_schedule"
        ordering = ["name"]
        indexes = [
            models.Index(
                fields=["next_run_at"], condition=Q(enabled=True), name="pqjobs_schedule_due"
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=(Q(cron="") & Q(interval_seconds__gt=0))
                | (~Q(cron="") & Q(interval_seconds__isnull=True)),
                name="pqjobs_schedule_cron_xor_interval",
            ),
            models.CheckConstraint(
                condition=Q(overlap__in=["skip", "allow"]), name="pqjobs_schedule_overlap_valid"
            ),
            models.CheckConstraint(
                condition=Q(misfire__in=["run_once", "skip"]),
                name="pqjobs_schedule_misfire_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name
