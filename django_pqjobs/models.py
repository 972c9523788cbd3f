"""Tables: Job (one row per job), JobAttempt (failure history), WorkerRecord (live workers),
Schedule (recurring jobs), OperatorAction (the audit trail of operator actions), Batch and
Dependency (composition: jobs finished together, jobs that wait for others).

Status changes are not made here: they live in ``transitions/`` (the state machine), so
that every transition can be read in one place. The vocabulary (statuses, failure
kinds) is in ``statuses.py``; text limits come from ``options.py``, which validates the
values before they reach these columns.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models import Expression, ExpressionWrapper, F, Q
from django.db.models.functions import Now

from .options import (
    ACTOR_MAX_LENGTH,
    DEDUPE_KEY_MAX_LENGTH,
    FAIR_WEIGHT_MAX,
    NAME_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
)
from .statuses import (
    ACTIVE_STATUSES,
    FINISHED_STATUSES,
    AuditAction,
    FailureKind,
    JobStatus,
)

__all__ = [
    "ACTIVE_STATUSES",
    "FINISHED_STATUSES",
    "AuditAction",
    "Batch",
    "Dependency",
    "DurationBucket",
    "FailureKind",
    "Job",
    "JobAttempt",
    "JobQuerySet",
    "JobStatus",
    "KeySlots",
    "MisfirePolicy",
    "OnHotShelf",
    "OperatorAction",
    "OutcomeCount",
    "OverlapPolicy",
    "Pause",
    "PauseKind",
    "RateBucket",
    "Schedule",
    "WorkerRecord",
]


# What a Timestamp reads back for a value before or after Python's calendar.
CALENDAR_START = datetime.min.replace(tzinfo=UTC)
CALENDAR_END = datetime.max.replace(tzinfo=UTC)
_EARLIEST = "0001-01-01 00:00:00+00"
_LATEST = "9999-12-31 23:59:59.999999+00"


class Timestamp(models.DateTimeField):
    """A ``timestamptz`` column, read back inside the calendar Python has (years 1-9999).

    PostgreSQL stores far more: ``'infinity'``, year 200000, 4000 BC. A row written behind
    the application's back with such a value made every query that read it fail (the job
    list, the job page, the dashboard answered 500). Reads are clamped in SQL to
    ``0001-01-01`` .. ``9999-12-31 23:59:59.999999`` UTC (``CALENDAR_START``,
    ``CALENDAR_END``), which the admin shows as "before the year 1" and "after the year
    9999"; what is stored, compared and sorted is untouched. Migrations see a plain
    ``DateTimeField``.
    """

    def select_format(self, compiler: Any, sql: str, params: Any) -> tuple[str, Any]:
        # CASE, not LEAST/GREATEST: those would turn NULL into a bound
        return (
            f"CASE WHEN {sql} < '{_EARLIEST}' THEN '{_EARLIEST}'::timestamptz "
            f"WHEN {sql} > '{_LATEST}' THEN '{_LATEST}'::timestamptz ELSE {sql} END",
            tuple(params) * 3,
        )

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.DateTimeField", args, kwargs


class OnHotShelf(Expression):
    """``shelf = 'hot'`` of the query's job table: the condition that lets PostgreSQL plan
    and lock the hot partition of ``pqjobs_job`` alone (the column is SQL's, not the
    model's: see ``sql/schema/history.sql``)."""

    output_field = models.BooleanField()
    conditional = True

    def __init__(self, alias: str | None = None) -> None:
        super().__init__()
        self.alias = alias

    def resolve_expression(
        self,
        query: Any = None,
        allow_joins: bool = True,
        reuse: Any = None,
        summarize: bool = False,
        for_save: bool = False,
    ) -> OnHotShelf:
        return OnHotShelf(query.get_initial_alias() if query is not None else self.alias)

    def relabeled_clone(self, change_map: Mapping[str, str]) -> OnHotShelf:
        return OnHotShelf(change_map.get(self.alias, self.alias) if self.alias else None)

    def get_group_by_cols(self) -> list[Any]:
        return []

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[str | int, ...]]:
        # Django 6.1 quotes every name and alias with quote_name() and deprecates
        # quote_name_unless_alias(); Django 5.2 and 6.0 have only the latter.
        quote = getattr(compiler, "quote_name", None) or compiler.quote_name_unless_alias
        table = quote(self.alias or Job._meta.db_table)
        return f"{table}.{connection.ops.quote_name('shelf')} = 'hot'", ()


class JobQuerySet(models.QuerySet["Job"]):
    def hot(self) -> JobQuerySet:
        """The jobs on the hot shelf: every job not finished, and the finished ones not
        moved to history yet. A query about jobs still to run says it (the status filters
        below do), so that it neither plans nor locks the history partitions."""
        return self.filter(OnHotShelf())

    def get_hot_first(self, **lookup: Any) -> Job:
        """``get(**lookup)`` (a job by id), looked for on the hot shelf first and on every
        shelf only if it is not there: a job still to run, or finished lately, is found
        with one partition planned and locked instead of every history partition."""
        try:
            return self.hot().get(**lookup)
        except self.model.DoesNotExist:
            return self.get(**lookup)

    def ready(self) -> JobQuerySet:
        return self.hot().filter(status=JobStatus.READY)

    def due(self) -> JobQuerySet:
        return self.ready().filter(run_after__lte=Now())

    def running(self) -> JobQuerySet:
        return self.hot().filter(status=JobStatus.RUNNING)

    def active(self) -> JobQuerySet:
        return self.hot().filter(status__in=ACTIVE_STATUSES)

    def waiting(self) -> JobQuerySet:
        return self.hot().filter(status=JobStatus.WAITING)

    def done(self) -> JobQuerySet:
        return self.filter(status=JobStatus.DONE)

    def failed(self) -> JobQuerySet:
        return self.filter(status=JobStatus.FAILED)

    def cancelled(self) -> JobQuerySet:
        return self.filter(status=JobStatus.CANCELLED)

    def expired(self) -> JobQuerySet:
        return self.filter(status=JobStatus.EXPIRED)

    def finished(self) -> JobQuerySet:
        return self.filter(status__in=FINISHED_STATUSES)


class Job(models.Model):
    """One job. History stays in the table until pruned (see ``PQJOBS['RETENTION']``)."""

    id = models.BigAutoField(primary_key=True)
    job_type = models.CharField(max_length=NAME_MAX_LENGTH)
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH, default="default", db_default="default")
    payload = models.JSONField(encoder=DjangoJSONEncoder, default=dict)
    status = models.CharField(
        max_length=16,
        choices=JobStatus.choices,
        default=JobStatus.READY,
        db_default=JobStatus.READY,
    )
    priority = models.IntegerField(default=0, db_default=0, help_text="Higher runs first.")
    attempts = models.IntegerField(default=0, db_default=0)
    max_attempts = models.IntegerField(default=5, db_default=5)
    run_after = Timestamp(db_default=Now())
    timeout_seconds = models.FloatField(null=True, blank=True)
    locked_at = Timestamp(null=True, blank=True)
    locked_by = models.CharField(max_length=NAME_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    heartbeat_at = Timestamp(null=True, blank=True)
    retried_from = models.IntegerField(
        default=0,
        db_default=0,
        help_text="Attempts made before the last operator Retry: the backoff counts "
        "attempts from there, and the next Retry grants as many as this round had.",
    )
    started_at = Timestamp(
        null=True,
        blank=True,
        help_text="When a handler last started (recorded just after it starts). A rescued "
        "job whose current attempt never started gets that attempt back.",
    )
    # NULL, not "", means "no dedupe": the partial unique index skips NULLs. The index
    # (pqjobs_job_unique_key) is SQL's, not this model's: its predicate reads the mask
    # below, which Django's constraints cannot say (see sql/schema/uniqueness.sql).
    dedupe_key = models.CharField(  # noqa: DJ001
        max_length=DEDUPE_KEY_MAX_LENGTH, null=True, blank=True
    )
    unique_until = Timestamp(
        null=True,
        blank=True,
        help_text="The end of the unique_for window the job was enqueued in: its key is "
        "held until then (whatever its status, as unique_states say). Empty: no window.",
    )
    unique_states = models.PositiveSmallIntegerField(
        default=0,
        db_default=0,
        help_text="The finished statuses in which the job still holds its dedupe key, as a "
        "mask: 1 done, 2 failed, 4 cancelled (it always holds it while ready, blocked or "
        "running).",
    )
    expires_at = Timestamp(
        null=True,
        blank=True,
        help_text="The deadline: no attempt starts after it; a job not started by then ends "
        "expired. Empty: none.",
    )
    sequence_key = models.CharField(  # noqa: DJ001
        max_length=DEDUPE_KEY_MAX_LENGTH,
        null=True,
        blank=True,
        help_text="The sequence the job belongs to: jobs of one sequence run one at a time, "
        "in enqueue order (each waits for the one before it).",
    )
    payload_version = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="The version of its job type's payload shape the payload was written for "
        "(@job(version=N)); empty: 1. An older one is upgraded before the handler runs.",
    )
    fair_key = models.CharField(  # noqa: DJ001
        max_length=DEDUPE_KEY_MAX_LENGTH,
        null=True,
        blank=True,
        help_text="The key workers share out by (@job(fair_key=...)): among due jobs of equal "
        "priority, keys take turns, weighted by pqjobs_fair_weight.",
    )
    fair_turn = models.FloatField(
        null=True,
        blank=True,
        help_text="The job's place in its key's turns, given at enqueue (the trigger "
        "pqjobs_job_fair_turn); empty once claimed, or for jobs not due when enqueued.",
    )
    last_error = models.TextField(blank=True, default="", db_default="")
    error_type = models.CharField(max_length=200, blank=True, default="", db_default="")
    result = models.JSONField(encoder=DjangoJSONEncoder, null=True, blank=True)
    finished_at = Timestamp(null=True, blank=True)
    duration_ms = models.BigIntegerField(null=True, blank=True)
    progress = models.JSONField(null=True, blank=True)
    cancel_requested_at = Timestamp(null=True, blank=True)
    # Flow control (see flow.py): the job's concurrency key and limit, its rate bucket and
    # rate, copied from its job type's declaration when it was enqueued.
    concurrency_key = models.CharField(  # noqa: DJ001
        max_length=DEDUPE_KEY_MAX_LENGTH, null=True, blank=True
    )
    concurrency_limit = models.IntegerField(null=True, blank=True)
    rate_key = models.CharField(max_length=DEDUPE_KEY_MAX_LENGTH, null=True, blank=True)  # noqa: DJ001
    rate_limit = models.IntegerField(null=True, blank=True)
    rate_period = models.FloatField(null=True, blank=True)
    blocked_by = models.CharField(  # noqa: DJ001
        max_length=16, null=True, blank=True, help_text="limit, rate or paused"
    )
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
    batch = models.ForeignKey(
        "Batch",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="members",
        help_text="The batch this job is a member of.",
    )
    callback_of = models.ForeignKey(
        "Batch",
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="callback_jobs",
        help_text="The batch whose finish enqueued this job (a callback).",
    )
    waiting_for = models.IntegerField(
        default=0, db_default=0, help_text="Dependencies not finished yet."
    )
    on_dependency_failure = models.CharField(
        max_length=8,
        default="cancel",
        db_default="cancel",
        help_text="When a dependency fails for good: cancel this job, run it anyway, or halt "
        "(wait until the dependency is retried or skipped).",
    )
    has_dependents = models.BooleanField(
        default=False, db_default=False, help_text="Some job waits for this one."
    )
    waited_on = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Someone called wait_for() on this job: its finish is announced.",
    )
    # W3C trace context (``traceparent``, ``tracestate``) of the span that enqueued the job,
    # when OpenTelemetry is in use: each attempt's span continues that trace.
    trace_context = models.JSONField(null=True, blank=True, editable=False)
    created_at = Timestamp(db_default=Now())
    updated_at = Timestamp(db_default=Now())

    objects = JobQuerySet.as_manager()

    class Meta:
        db_table = "pqjobs_job"
        ordering = ["-id"]
        permissions = [
            (
                "view_job_secrets",
                "Can see secrets in job data (fields PQJOBS['REDACTED_FIELDS'] names, "
                "encrypted payloads and results)",
            ),
        ]
        indexes = [
            # Serves the claim query's WHERE and ORDER BY exactly: claiming reads only ready
            # rows, however many finished rows the table holds. Jobs with a fair turn lie
            # apart in it, first (claimed in turn order instead, through the next index; see
            # sql/schema/claim.sql), so the claim by age never walks over them, while every
            # ready job stays in it for whoever counts them.
            models.Index(
                ExpressionWrapper(Q(fair_turn__isnull=True), output_field=models.BooleanField()),
                F("priority").desc(),
                F("run_after"),
                F("id"),
                condition=Q(status=JobStatus.READY),
                name="pqjobs_job_claim",
            ),
            models.Index(
                F("priority").desc(),
                "fair_turn",
                "id",
                condition=Q(status=JobStatus.READY, fair_turn__isnull=False),
                name="pqjobs_job_fair_claim",
            ),
            # a key's last turn, where its next job's turn starts (sql/schema/fairness.sql)
            models.Index(
                "fair_key",
                "priority",
                "fair_turn",
                condition=Q(status=JobStatus.READY, fair_turn__isnull=False),
                name="pqjobs_job_fair_key",
            ),
            models.Index(
                "heartbeat_at", condition=Q(status=JobStatus.RUNNING), name="pqjobs_job_running"
            ),
            models.Index(
                "finished_at",
                condition=Q(status__in=FINISHED_STATUSES),
                name="pqjobs_job_finished",
            ),
            # The admin's job type filter (newest first) and its choices (a loose index
            # scan). Every full index costs each status change (no update is HOT: status is
            # in the partial indexes' predicates), so the other admin indexes are partial:
            # they hold only the rare rows they serve.
            models.Index("job_type", F("id").desc(), name="pqjobs_job_type_id"),
            models.Index(
                F("id").desc(), condition=Q(status=JobStatus.FAILED), name="pqjobs_job_failed"
            ),
            models.Index(F("id").desc(), condition=~Q(last_error=""), name="pqjobs_job_has_error"),
            models.Index("parent", condition=Q(parent__isnull=False), name="pqjobs_job_parent"),
            # Flow control: the next blocked job of a key or a rate bucket, in claim order,
            # and the running jobs of a key (to recount its slots).
            models.Index(
                "concurrency_key",
                F("priority").desc(),
                "run_after",
                "id",
                condition=Q(status=JobStatus.BLOCKED),
                name="pqjobs_job_blocked_key",
            ),
            models.Index(
                "rate_key",
                F("priority").desc(),
                "run_after",
                "id",
                condition=Q(status=JobStatus.BLOCKED, rate_key__isnull=False),
                name="pqjobs_job_blocked_rate",
            ),
            models.Index(
                "concurrency_key",
                condition=Q(status=JobStatus.RUNNING, concurrency_key__isnull=False),
                name="pqjobs_job_running_key",
            ),
            # The ready jobs of a key or a rate, by priority: at enqueue, how many are ahead
            # of a new job (sql/schema/flow.sql holds it when they fill its key or window).
            models.Index(
                "concurrency_key",
                F("priority").desc(),
                "run_after",
                condition=Q(status=JobStatus.READY, concurrency_key__isnull=False),
                name="pqjobs_job_ready_key",
            ),
            models.Index(
                "rate_key",
                F("priority").desc(),
                "run_after",
                condition=Q(status=JobStatus.READY, rate_key__isnull=False),
                name="pqjobs_job_ready_rate",
            ),
            # Composition: jobs waiting for dependencies (the admin's list and dashboard), a
            # batch's members (by status, for its page) and its callbacks.
            models.Index(
                F("id").desc(), condition=Q(status=JobStatus.WAITING), name="pqjobs_job_waiting"
            ),
            models.Index(
                "batch", "status", condition=Q(batch__isnull=False), name="pqjobs_job_batch"
            ),
            models.Index(
                "callback_of", condition=Q(callback_of__isnull=False), name="pqjobs_job_callback"
            ),
            # Durable workflows: parked jobs (waiting with no dependency left), by when they
            # wake (the sweep's next ones).
            models.Index(
                "run_after",
                condition=Q(status=JobStatus.WAITING, waiting_for=0),
                name="pqjobs_job_parked",
            ),
            # Deadlines: the sweep's next jobs to expire (only those not started yet).
            models.Index(
                "expires_at",
                condition=Q(
                    expires_at__isnull=False,
                    status__in=(JobStatus.WAITING, JobStatus.READY, JobStatus.BLOCKED),
                ),
                name="pqjobs_job_expiring",
            ),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values),
                name="pqjobs_job_status_valid",
            ),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="pqjobs_job_max_attempts"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} #{self.id} ({self.status})"


class Dashboard(Job):
    """The job queue's dashboard as an entry of the admin's model lists (its index and its
    navigation sidebar): a proxy of :class:`Job` with no table of its own. Its admin shows the
    dashboard (``admin/dashboard.py``) to whoever may view jobs."""

    class Meta:
        proxy = True
        verbose_name = "dashboard"
        verbose_name_plural = "dashboard"
        default_permissions = ()


class JobAttempt(models.Model):
    """One attempt of a job that did not succeed. Every failure is kept, not only the last."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, db_constraint=False, related_name="failed_attempts"
    )
    attempt = models.IntegerField()
    worker_id = models.CharField(max_length=NAME_MAX_LENGTH, blank=True, default="")
    started_at = Timestamp(null=True, blank=True)
    finished_at = Timestamp(db_default=Now())
    outcome = models.CharField(max_length=16, choices=FailureKind.choices)
    error_type = models.CharField(max_length=200, blank=True, default="")
    traceback = models.TextField(blank=True, default="")

    class Meta:
        db_table = "pqjobs_attempt"
        indexes = [models.Index("finished_at", name="pqjobs_attempt_finished")]
        ordering = ["job_id", "attempt", "id"]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.outcome}"


class OperatorAction(models.Model):
    """One thing an operator did (Retry, Cancel, Run now, Release, Delete, Pause, Resume,
    a schedule's Enable, Disable or Run now): who, when, to what. Written by ``audit.py``.

    Jobs are referred to by id, not by foreign key, so the trail outlives the jobs it is
    about (pruned or deleted); it is pruned on its own retention, ``AUDIT_RETENTION``.
    """

    id = models.BigAutoField(primary_key=True)
    at = Timestamp(db_default=Now())
    actor = models.CharField(max_length=ACTOR_MAX_LENGTH, help_text="Who did it.")
    action = models.CharField(max_length=32, choices=AuditAction.choices)
    job_id = models.BigIntegerField(null=True, blank=True, help_text="The job acted on.")
    schedule_id = models.BigIntegerField(null=True, blank=True, help_text="The schedule acted on.")
    target = models.CharField(
        max_length=NAME_MAX_LENGTH,
        blank=True,
        default="",
        help_text="The job's type, the queue or job type paused, or the schedule's name.",
    )
    detail = models.TextField(blank=True, default="", help_text="What it changed.")

    class Meta:
        db_table = "pqjobs_audit"
        ordering = ["-id"]
        verbose_name = "operator action"
        indexes = [
            # A job page's events, and a schedule's; one operator's actions (the audit
            # list's search); pruning by age.
            models.Index(
                "job_id", F("id").desc(), condition=Q(job_id__isnull=False), name="pqjobs_audit_job"
            ),
            models.Index(
                "schedule_id",
                F("id").desc(),
                condition=Q(schedule_id__isnull=False),
                name="pqjobs_audit_schedule",
            ),
            models.Index("actor", F("id").desc(), name="pqjobs_audit_actor"),
            models.Index("at", name="pqjobs_audit_at"),
        ]

    def __str__(self) -> str:
        return f"{self.action} by {self.actor} at {self.at}"


class WorkerRecord(models.Model):
    """A running ``run_jobs`` (or embedded) worker; its heartbeat shows it is alive."""

    worker_id = models.CharField(max_length=NAME_MAX_LENGTH, primary_key=True)
    hostname = models.CharField(max_length=255, blank=True, default="")
    pid = models.IntegerField(null=True, blank=True)
    queues = models.JSONField(null=True, blank=True, help_text="null means every queue")
    concurrency = models.IntegerField(default=1)
    # The bounds of its live concurrency (capacity.py): what it was started with, and its
    # --max-concurrency. Null on a row a worker from before migration 0032 wrote.
    started_concurrency = models.IntegerField(null=True, blank=True)
    max_concurrency = models.IntegerField(null=True, blank=True)
    started_at = Timestamp(db_default=Now())
    heartbeat_at = Timestamp(db_default=Now())
    loop_at = Timestamp(
        null=True,
        blank=True,
        help_text="When the claim loop last ran: claimed, looked for work, or waited for a "
        "free executor. A worker that heartbeats but whose loop stopped claims nothing.",
    )
    listening = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Whether its listener LISTENs now; enqueues send NOTIFY only while some "
        "worker does.",
    )

    class Meta:
        db_table = "pqjobs_worker"
        ordering = ["worker_id"]

    def __str__(self) -> str:
        return self.worker_id


class Batch(models.Model):
    """Jobs enqueued together whose callbacks run once all of them are finished.

    The counts are kept by the database (sql/schema/composition.sql): a member that finishes, is
    retried, cancelled or deleted while active moves them in the transaction that changes
    it, and the transaction that finishes the last member enqueues the callbacks, exactly
    once per finish. ``callbacks`` holds each callback's prepared job (type, queue,
    priority, attempts, timeout, payload).
    """

    id = models.BigAutoField(primary_key=True)
    label = models.CharField(max_length=NAME_MAX_LENGTH, blank=True, default="", db_default="")
    callbacks = models.JSONField(default=dict, blank=True)
    sealed = models.BooleanField(
        default=False,
        db_default=False,
        help_text="All members are in: callbacks may fire once none is active.",
    )
    total = models.IntegerField(default=0, db_default=0)
    pending = models.IntegerField(default=0, db_default=0, help_text="Members not finished.")
    done = models.IntegerField(default=0, db_default=0)
    failed = models.IntegerField(default=0, db_default=0)
    cancelled = models.IntegerField(
        default=0, db_default=0, help_text="Members cancelled, or deleted before they finished."
    )
    finishes = models.IntegerField(
        default=0, db_default=0, help_text="How many times it finished (Retry reopens it)."
    )
    created_at = Timestamp(db_default=Now())
    finished_at = Timestamp(null=True, blank=True)

    class Meta:
        db_table = "pqjobs_batch"
        ordering = ["-id"]
        verbose_name_plural = "batches"

    def __str__(self) -> str:
        name = f" {self.label}" if self.label else ""
        return f"batch #{self.id}{name} ({self.total - self.pending}/{self.total} finished)"

    @property
    def is_finished(self) -> bool:
        return self.sealed and self.pending == 0


class Dependency(models.Model):
    """``job`` waits for ``depends_on``: one row per edge, written at enqueue."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        db_index=False,
        related_name="dependency_edges",
        help_text="The dependent job.",
    )
    depends_on = models.ForeignKey(
        Job,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="dependent_edges",
        help_text="The job it waits for.",
    )

    class Meta:
        db_table = "pqjobs_dependency"
        constraints = [
            models.UniqueConstraint(fields=["job", "depends_on"], name="pqjobs_dependency_unique")
        ]

    def __str__(self) -> str:
        return f"#{self.job_id} waits for #{self.depends_on_id}"


class KeySlots(models.Model):
    """How many jobs of a concurrency key are running, kept by the claim (which takes a
    slot only while fewer than the limit run) and by a trigger on every way out of
    ``running``. Created when the first job of the key is enqueued."""

    key = models.CharField(max_length=DEDUPE_KEY_MAX_LENGTH, primary_key=True)
    running = models.IntegerField(default=0, db_default=0)
    last_grant = models.IntegerField(default=0, db_default=0)

    class Meta:
        db_table = "pqjobs_key_slot"
        verbose_name = "concurrency key"

    def __str__(self) -> str:
        return f"{self.key}: {self.running} running"


class RateBucket(models.Model):
    """Starts counted per fixed window of ``period`` seconds; at most ``allowance`` each."""

    key = models.CharField(max_length=DEDUPE_KEY_MAX_LENGTH, primary_key=True)
    allowance = models.IntegerField()
    period = models.FloatField()
    window_start = Timestamp(null=True, blank=True)
    used = models.IntegerField(default=0, db_default=0)
    last_grant = models.IntegerField(default=0, db_default=0)

    class Meta:
        db_table = "pqjobs_rate"

    def __str__(self) -> str:
        return f"{self.key}: {self.allowance} per {self.period:g} s"


class PauseKind(models.TextChoices):
    QUEUE = "queue", "Queue"
    JOB_TYPE = "job_type", "Job type"


class Pause(models.Model):
    """A paused queue or job type: workers claim none of its jobs until it is resumed."""

    kind = models.CharField(max_length=16, choices=PauseKind.choices)
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    paused_at = Timestamp(db_default=Now())
    paused_by = models.CharField(max_length=150, blank=True, default="", db_default="")

    class Meta:
        db_table = "pqjobs_pause"
        ordering = ["kind", "name"]
        constraints = [
            models.UniqueConstraint(fields=["kind", "name"], name="pqjobs_pause_unique"),
            models.CheckConstraint(
                condition=Q(kind__in=PauseKind.values), name="pqjobs_pause_kind_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


class ConcurrencySetting(models.Model):
    """How many jobs at once the running workers of ``name`` run: a worker group (the
    processes ``NAME-1`` ... of ``run_jobs --processes N --worker-id NAME``), one worker id,
    or ``"*"`` for every worker. Read by the workers every few seconds (``capacity.py``)."""

    name = models.CharField(max_length=NAME_MAX_LENGTH, primary_key=True)
    concurrency = models.PositiveIntegerField()
    set_at = Timestamp(db_default=Now())
    set_by = models.CharField(max_length=150, blank=True, default="", db_default="")

    class Meta:
        db_table = "pqjobs_concurrency"
        ordering = ["name"]
        verbose_name = "worker concurrency"
        verbose_name_plural = "worker concurrency"
        constraints = [
            models.CheckConstraint(
                condition=Q(concurrency__gte=1), name="pqjobs_concurrency_positive"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name}: {self.concurrency}"


class FairWeight(models.Model):
    """A fair key's weight (``@job(fair_key=...)``): a key of weight 3 gets three turns for
    each turn of a key of weight 1 among due jobs of equal priority. Keys without a row
    weigh 1. Read when a job is enqueued (``sql/schema/fairness.sql``): a change applies to
    jobs enqueued after it."""

    key = models.CharField(max_length=DEDUPE_KEY_MAX_LENGTH, primary_key=True)
    weight = models.PositiveSmallIntegerField(
        help_text=f"From 1 to {FAIR_WEIGHT_MAX}: turns taken for each turn of a key weighing 1."
    )
    set_at = Timestamp(db_default=Now())
    set_by = models.CharField(max_length=150, blank=True, default="", db_default="")

    class Meta:
        db_table = "pqjobs_fair_weight"
        ordering = ["key"]
        verbose_name = "fair key weight"
        constraints = [
            models.CheckConstraint(
                condition=Q(weight__gte=1, weight__lte=FAIR_WEIGHT_MAX),
                name="pqjobs_fair_weight_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.key}: {self.weight}"


class SequenceTail(models.Model):
    """The job enqueued last in a sequence (``@job(sequence=...)``): the next one waits for
    it. Its row is also the lock enqueuers of the sequence take turns on, so each finds
    the one before it. (A lookup by primary key: the job table needs no index for it, and
    its updates no index entry more.)"""

    key = models.CharField(max_length=DEDUPE_KEY_MAX_LENGTH, primary_key=True)
    last_job_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "pqjobs_sequence"
        ordering = ["key"]

    def __str__(self) -> str:
        return f"sequence {self.key}: last job #{self.last_job_id}"


class ProtectedType(models.Model):
    """A job type declared ``encrypted``, as ``manage.py migrate`` last published it:
    ``pqjobs_enqueue()`` refuses a payload of it that is not sealed, so no SQL caller stores
    one in clear. ``fields``: the top-level fields sealed one by one, or null (the whole
    payload)."""

    job_type = models.CharField(max_length=NAME_MAX_LENGTH, primary_key=True)
    fields = models.JSONField(null=True, blank=True)

    class Meta:
        db_table = "pqjobs_protected_type"
        ordering = ["job_type"]

    def __str__(self) -> str:
        return f"{self.job_type}: encrypted"


class StepKind(models.TextChoices):
    STEP = "step", "Step"
    SLEEP = "sleep", "Durable sleep"
    SIGNAL = "signal", "Wait for a signal"
    CHILD = "child", "Wait for a child job"


class Step(models.Model):
    """One step of a durable workflow (``ctx.step``, ``ctx.sleep``,
    ``ctx.wait_for_signal``): a step's result once it returned, so that a later run of
    the job returns it without running the step again; a sleep or a wait, with when it
    ends (``wake_at``) and whether it is over (``finished_at``)."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, db_constraint=False, related_name="steps"
    )
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    kind = models.CharField(max_length=8, choices=StepKind.choices)
    result = models.JSONField(encoder=DjangoJSONEncoder, null=True, blank=True)
    attempt = models.IntegerField(help_text="The attempt that ran it.")
    started_at = Timestamp(db_default=Now())
    finished_at = Timestamp(null=True, blank=True, help_text="Empty: a wait not over yet.")
    wake_at = Timestamp(
        null=True, blank=True, help_text="When a sleep ends, or a wait for a signal times out."
    )

    class Meta:
        db_table = "pqjobs_step"
        ordering = ["job", "id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="pqjobs_step_job_name"),
        ]
        indexes = [
            # the sweep's: children being waited for, to wake their parents when they finish
            models.Index(
                "job",
                condition=Q(kind="child", finished_at__isnull=True),
                name="pqjobs_step_open_child",
            ),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.kind} {self.name!r}"


class Signal(models.Model):
    """A signal sent to a job (``send_signal``): what its ``ctx.wait_for_signal`` returns.
    One per job and name: a second send of it changes nothing."""

    id = models.BigAutoField(primary_key=True)
    job = models.ForeignKey(
        Job, on_delete=models.CASCADE, db_constraint=False, related_name="signals"
    )
    name = models.CharField(max_length=NAME_MAX_LENGTH)
    payload = models.JSONField(encoder=DjangoJSONEncoder, null=True, blank=True)
    sent_at = Timestamp(db_default=Now())

    class Meta:
        db_table = "pqjobs_signal"
        ordering = ["job", "id"]
        constraints = [
            models.UniqueConstraint(fields=["job", "name"], name="pqjobs_signal_job_name"),
        ]

    def __str__(self) -> str:
        return f"signal {self.name!r} to job {self.job_id}"


class OverlapPolicy(models.TextChoices):
    SKIP = "skip", "Skip a run while the previous one is ready or running"
    ALLOW = "allow", "Allow overlapping runs"


class MisfirePolicy(models.TextChoices):
    RUN_ONCE = "run_once", "Run once now, then resume the schedule"
    SKIP = "skip", "Skip missed runs; wait for the next one"


class Schedule(models.Model):
    """A recurring job: a cron expression or a fixed interval (see ``recurrence.py``).

    ``declared`` holds what the code (``@job(cron=...)`` or ``PQJOBS['SCHEDULES']``) last
    declared; it is NULL for schedules created in the admin. Syncing updates a field only
    when the code changed that field, so admin edits of the others are kept.
    """

    name = models.CharField(max_length=NAME_MAX_LENGTH, unique=True)
    job_type = models.CharField(max_length=NAME_MAX_LENGTH)
    payload = models.JSONField(encoder=DjangoJSONEncoder, default=dict, blank=True)
    queue = models.CharField(
        max_length=QUEUE_MAX_LENGTH,
        blank=True,
        default="",
        help_text="Blank: the job type's queue.",
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
    next_run_at = Timestamp(null=True, blank=True)
    last_run_at = Timestamp(null=True, blank=True)
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
    created_at = Timestamp(db_default=Now())
    updated_at = Timestamp(db_default=Now())

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
                condition=Q(overlap__in=OverlapPolicy.values), name="pqjobs_schedule_overlap_valid"
            ),
            models.CheckConstraint(
                condition=Q(misfire__in=MisfirePolicy.values),
                name="pqjobs_schedule_misfire_valid",
            ),
        ]

    def __str__(self) -> str:
        return self.name


class OutcomeCount(models.Model):
    """How many attempts ended with each outcome, per job type and queue, since ever.

    Workers add what they recorded every ``PQJOBS['STATS_INTERVAL']``; nothing else writes
    here. Pruning the job table leaves these counts alone, so they are counters in the
    Prometheus sense: they only grow, across every worker on every host.
    """

    id = models.BigAutoField(primary_key=True)
    job_type = models.CharField(max_length=NAME_MAX_LENGTH)
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH)
    outcome = models.CharField(max_length=16)
    count = models.BigIntegerField(default=0)
    duration_ms = models.BigIntegerField(default=0, help_text="Sum of the attempts' durations.")
    updated_at = Timestamp(db_default=Now())

    class Meta:
        db_table = "pqjobs_outcome_count"
        ordering = ["job_type", "queue", "outcome"]
        constraints = [
            models.UniqueConstraint(
                fields=["job_type", "queue", "outcome"], name="pqjobs_outcome_count_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.queue} {self.outcome}: {self.count}"


class DurationBucket(models.Model):
    """How many attempts ran for at most ``le`` seconds (and more than the next lower bound),
    per job type and queue: the runtime histogram, written like :class:`OutcomeCount`."""

    id = models.BigAutoField(primary_key=True)
    job_type = models.CharField(max_length=NAME_MAX_LENGTH)
    queue = models.CharField(max_length=QUEUE_MAX_LENGTH)
    le = models.FloatField(help_text="Upper bound in seconds (infinity for the last bucket).")
    count = models.BigIntegerField(default=0)

    class Meta:
        db_table = "pqjobs_duration_bucket"
        ordering = ["job_type", "queue", "le"]
        constraints = [
            models.UniqueConstraint(
                fields=["job_type", "queue", "le"], name="pqjobs_duration_bucket_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.queue} <= {self.le} s: {self.count}"
