"""The vocabulary of a job's life: its statuses and how an attempt can end.

Plain enums with no model behind them, so the state machine (``transitions/``), the
models' constraints, the admin and the worker all speak the same words, and the package
can import them before Django's app registry is ready.
"""

from __future__ import annotations

from typing import Literal

from django.db import models


class JobStatus(models.TextChoices):
    """Where a job is: ``ready`` → ``running`` → ``done`` | ``failed`` | ``cancelled``.

    ``expired``: its deadline (``expires_in``/``deadline``) passed before an attempt could
    start; no attempt starts after it, and the worker's sweep ends such jobs.

    ``waiting``: enqueued with ``depends_on``; it becomes ``ready`` when its last dependency
    is done (or, under the ``"run"`` policy, finished however it ended), and
    ``cancelled`` when a dependency fails for good under the ``"cancel"`` policy. Also a
    durable workflow parked by its handler (``ctx.sleep``, ``ctx.wait_for_signal``: no
    dependency left, ``waiting_for`` 0), ``ready`` again at its ``run_after`` or when its
    signal comes (``workflows.py``).

    ``blocked``: ready to run but held back by flow control (its concurrency key is at its
    limit, its rate is used up, or its queue or type is paused); it becomes ``ready`` again
    when that clears.
    """

    WAITING = "waiting", "Waiting"
    READY = "ready", "Ready"
    BLOCKED = "blocked", "Blocked"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    EXPIRED = "expired", "Expired"


# A job is *active* until it reaches a final status.
ACTIVE_STATUSES: tuple[JobStatus, ...] = (
    JobStatus.WAITING,
    JobStatus.READY,
    JobStatus.BLOCKED,
    JobStatus.RUNNING,
)
# Dedupe keys bind these (a job with dependencies cannot have a dedupe key, so a waiting job
# never holds one); the partial unique index and pqjobs_enqueue()'s ON CONFLICT name them.
DEDUPE_STATUSES: tuple[JobStatus, ...] = (JobStatus.READY, JobStatus.BLOCKED, JobStatus.RUNNING)
FINISHED_STATUSES: tuple[JobStatus, ...] = (
    JobStatus.DONE,
    JobStatus.FAILED,
    JobStatus.CANCELLED,
    JobStatus.EXPIRED,
)


class FailureKind(models.TextChoices):
    """The kind of a failed attempt: a verdict's ``failure``, stored in the ``outcome``
    column of the attempt history (``JobAttempt``, one row per attempt that did not
    succeed)."""

    ERROR = "error", "Error (retryable)"
    PERMANENT = "permanent", "Permanent error"
    TIMEOUT = "timeout", "Timed out"
    UNKNOWN_TYPE = "unknown_type", "No handler registered"
    LOST = "lost", "Worker lost (rescued)"
    RELEASED = "released", "Released (the attempt was given back)"
    SNOOZED = "snoozed", "Snoozed (not charged)"
    PARKED = "parked", "Parked (a durable sleep or a wait for a signal; not charged)"
    CANCELLED = "cancelled", "Cancelled while running"
    KILLED = "killed", "Process killed (likely out of memory)"
    CRASHED = "crashed", "Process crashed (signal)"
    EXITED = "exited", "Process exited early"


class AuditAction(models.TextChoices):
    """What an operator did (one row of the audit trail, ``audit.py``, each)."""

    RETRY = "retry", "Retry"
    CANCEL = "cancel", "Cancel"
    RUN_NOW = "run_now", "Run now"
    RELEASE = "release", "Release"
    DELETE = "delete", "Delete"
    PAUSE = "pause", "Pause"
    RESUME = "resume", "Resume"
    SCHEDULE_ENABLE = "schedule_enable", "Enable schedule"
    SCHEDULE_DISABLE = "schedule_disable", "Disable schedule"
    SCHEDULE_RUN_NOW = "schedule_run_now", "Run schedule now"
    CONCURRENCY = "concurrency", "Set worker concurrency"
    SKIP = "skip", "Skip (a halted sequence goes on)"
    END_WAIT = "end_wait", "End a workflow's wait"
    SIGNAL = "signal", "Send a signal"
    FAIR_WEIGHT = "fair_weight", "Set a fair key's weight"


# After failure: where an attempt that did not succeed sends its job (a verdict's ``then``).
# "auto" back to ready while attempts remain (else failed, the dead-letter state); "failed"
# and "cancelled" end it at once; "release" gives the attempt back uncharged (the handler
# snoozed, or its database connection died under it), a bounded number of times in a row,
# and charges it after that (see worker/recorder.py: GIVE_BACK); "park" gives it back too,
# to wait durably (waiting, no worker held) until its time or a signal wakes it.
AfterFailure = Literal["auto", "failed", "cancelled", "release", "park"]

# The outcome of an attempt: what became of it once recorded, as ``job_finished``, a job
# type's ``on_finished``, the worker's counts and the metrics report it. The job's new
# status, "retry" (back to ready after a backoff), "lost" (the attempt was no longer ours),
# "released" (given back uncharged: at shutdown, or after its database connection died),
# "snoozed" (the handler raised Snooze: back to ready later, uncharged), "parked" (a durable
# sleep or a wait for a signal: waiting, uncharged, until woken) or "unrecorded" (the
# database stayed unreachable until the worker stopped; the job is rescued later). The one
# thing the package calls an outcome.
Outcome = Literal[
    "done",
    "retry",
    "failed",
    "cancelled",
    "expired",
    "lost",
    "released",
    "snoozed",
    "parked",
    "unrecorded",
]

# What a job waiting for dependencies does when one of them fails for good, is cancelled,
# expires or is deleted: be cancelled too (the default), run anyway once all of them are
# finished, or "halt": keep waiting while a dependency is failed, until an operator retries
# it (and it is done) or skips it (cancels it, or deletes it); any other ending lets it go
# on. Sequences use "halt" (sequences.py).
DependencyPolicy = Literal["cancel", "run", "halt"]
DEPENDENCY_POLICIES: tuple[DependencyPolicy, ...] = ("cancel", "run", "halt")

# What an attempt is told when a dependency's failure cancels its dependent.
DEPENDENCY_FAILED = "DependencyFailed"

# The callbacks a batch can have: on success (every member done), on failure (some member
# failed for good), on finish (every member finished, however each ended).
BatchCallback = Literal["success", "failure", "finish"]
BATCH_CALLBACKS: tuple[BatchCallback, ...] = ("success", "failure", "finish")

# What holds a blocked job back: its concurrency key is at its limit, its rate limit is
# used up for now, or its queue or job type is paused.
BlockedBy = Literal["limit", "rate", "paused"]
