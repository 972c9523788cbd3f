"""Helpers for testing code that enqueues and runs jobs.

- :func:`drain`: run the due jobs now, in this thread, on the test's own database
  connection (inside the test's transaction when there is one), and say how each ended.
  Jobs that handlers enqueue run too. ``run_delayed=True`` also runs delayed jobs and
  retries, so a failing job goes through all its attempts.
- :func:`enqueued_jobs`, :func:`assert_enqueued`, :func:`assert_not_enqueued`: what was
  enqueued, by job type, payload subset (JSON containment), queue and status.
- :func:`eager`: while active, every enqueue is followed by a :func:`drain` once it is
  committed, so code under test sees its jobs' effects at once.
- :func:`trigger_schedule`: enqueue one run of a schedule by name (syncing the schedules
  declared in code first).

The pytest plugin (:mod:`django_pqjobs.pytest_plugin`, registered automatically) exposes
these as the ``pqjobs`` and ``pqjobs_eager`` fixtures.

Jobs run the way a worker runs them (same outcomes, retries, signals, hooks, atomic jobs),
with two differences: timeouts are not enforced, and process-isolated job types run in the
test's process, so they see the test's uncommitted data like every other job.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django.db import connections, transaction
from django.db.models.functions import Now

from . import composition, signals, transitions
from .conf import conf
from .context import JobContext
from .models import Job, Schedule, Step
from .policies import DelaySequence
from .statuses import Outcome
from .transitions import Fence

WORKER_ID = "pqjobs-testing"
DEFAULT_MAX_JOBS = 1000

_draining = threading.local()


@dataclass(frozen=True)
class JobRun:
    """One attempt :func:`drain` ran, and how it was recorded."""

    job_id: int
    job_type: str
    attempt: int
    outcome: Outcome  # done, retry, snoozed, parked, failed, cancelled (or lost)
    error: str  # the error's one-line summary; empty when the job succeeded

    @property
    def succeeded(self) -> bool:
        return self.outcome == "done"


class JobsFailed(AssertionError):
    """Raised by ``drain(raise_errors=True)`` when an attempt did not succeed."""

    def __init__(self, runs: Sequence[JobRun]) -> None:
        self.runs = list(runs)
        lines = [f"job {r.job_id} {r.job_type} attempt {r.attempt}: {r.error}" for r in runs]
        super().__init__(f"{len(lines)} attempt(s) did not succeed:\n" + "\n".join(lines))


class TooManyJobs(RuntimeError):
    """:func:`drain` ran ``max_jobs`` attempts and more were due (a job enqueueing itself?)."""


def drain(
    queues: Sequence[str] | None = None,
    *,
    run_delayed: bool = False,
    max_jobs: int = DEFAULT_MAX_JOBS,
    raise_errors: bool = False,
    using: str | None = None,
) -> list[JobRun]:
    """Run due jobs (of ``queues``, default all) until none is due; return what ran.

    Jobs run one at a time in priority order, in the calling thread and on its database
    connection; jobs past their deadline end ``expired`` instead, as a worker's sweep ends
    them. ``run_delayed``: delayed jobs and retries waiting for their backoff are made
    due and run as well, until each job is done or out of attempts, and durable sleeps
    (``ctx.sleep``) end at once (a wait for a signal waits for the signal the test
    sends). ``raise_errors``: raise :class:`JobsFailed` listing the attempts that did not
    succeed (a snooze or a park is not a failure; with ``run_delayed`` a snoozed job is
    made due again at once). Raises
    :class:`TooManyJobs` after ``max_jobs`` attempts if jobs are still due.
    """
    from .worker.claiming import claim_jobs  # the worker package, only when a test drains
    from .worker.housekeeping import expire_overdue, wake_parked

    alias = using or conf.DATABASE
    runner = _Runner(alias)
    runs: list[JobRun] = []
    _draining.active = getattr(_draining, "active", 0) + 1
    try:
        while True:
            if run_delayed:
                _make_delayed_due(alias, queues)
            if expire_overdue(alias):  # as a worker's sweep would, before the claim
                composition.settle_now(alias)
            wake_parked(alias)
            batch = claim_jobs(alias, WORKER_ID, queues, 1)
            _reset_claim_settings(alias)
            if not batch:
                break
            if len(runs) >= max_jobs:
                transitions.release(alias, [Fence.of(job) for job in batch.jobs])
                raise TooManyJobs(
                    f"drain() ran {max_jobs} attempts and jobs are still due; raise max_jobs "
                    "if that is expected (a job that enqueues itself never drains)"
                )
            for job in batch.jobs:
                runs.append(runner.run(job))
            for row in batch.undecodable:
                runs.append(runner.fail_undecodable(row))
            composition.settle_now(alias)
    finally:
        _draining.active -= 1
    # a snooze is the handler's own "later", not a failure
    failed = [run for run in runs if not run.succeeded and run.outcome not in ("snoozed", "parked")]
    if raise_errors and failed:
        raise JobsFailed(failed)
    return runs


class _Runner:
    """The worker's executor and recorder, without threads: one job at a time, here."""

    def __init__(self, alias: str) -> None:
        from .worker.executor import Executor
        from .worker.recorder import Recorder

        self.alias = alias
        self.executor = Executor(alias, "thread", lambda slot: None, isolate=False)
        self.recorder = Recorder(alias, self._recorded, DelaySequence((0.0,)), lambda: False)
        self._status: dict[int, Outcome] = {}

    def _recorded(self, slot: Any, status: Outcome) -> None:
        self._status[slot.fence.job_id] = status

    def run(self, job: Job) -> JobRun:
        from .worker.slots import Slot

        ctx = JobContext(job=job, worker_id=WORKER_ID, attempt=job.attempts, using=self.alias)
        slot = Slot(job=job, ctx=ctx, fence=Fence.of(job))
        if job.cancel_requested_at is not None:
            ctx.request_cancel()
        try:
            verdict, recorded = self.executor.attempt(slot)
        finally:
            self.executor.close()
        self.recorder.finish(slot, verdict, recorded)
        return JobRun(
            job.id,
            job.job_type,
            job.attempts,
            self._status.pop(job.id, "unrecorded"),
            "" if verdict.succeeded else verdict.summary,
        )

    def fail_undecodable(self, row: Any) -> JobRun:
        from .worker.slots import Slot

        job = row.job()
        ctx = JobContext(job=job, worker_id=WORKER_ID, attempt=job.attempts, using=self.alias)
        slot = Slot(job=job, ctx=ctx, fence=row.fence)
        verdict = row.verdict()
        self.recorder.write([(slot, verdict)])
        return JobRun(
            job.id,
            job.job_type,
            job.attempts,
            self._status.pop(job.id, "unrecorded"),
            verdict.summary,
        )


def _make_delayed_due(alias: str, queues: Sequence[str] | None) -> None:
    delayed = Job.objects.using(alias).ready().filter(run_after__gt=Now())
    if queues:
        delayed = delayed.filter(queue__in=list(queues))
    ids = list(delayed.values_list("id", flat=True))
    if ids:
        transitions.run_now_many(alias, ids)
    # durable sleeps end now (a wait for a signal waits on: it is what the test sends)
    sleeping = Step.objects.using(alias).filter(
        kind="sleep", finished_at__isnull=True, job__status="waiting", job__waiting_for=0
    )
    if queues:
        sleeping = sleeping.filter(job__queue__in=list(queues))
    parked = list(sleeping.values_list("job_id", flat=True))
    if parked:
        sleeping.update(wake_at=Now())
        Job.objects.using(alias).hot().filter(id__in=parked).update(run_after=Now())


_CLAIM_SETTINGS = ("enable_bitmapscan", "enable_seqscan", "synchronous_commit")


def _reset_claim_settings(alias: str) -> None:
    """The claim pins planner settings for its transaction; inside a test's transaction
    that would be the rest of the test. Put them back."""
    connection = connections[alias]
    if connection.in_atomic_block:
        with connection.cursor() as cursor:
            for name in _CLAIM_SETTINGS:
                cursor.execute(f"SET LOCAL {name} TO DEFAULT")


# --- what was enqueued -------------------------------------------------------------------


def enqueued_jobs(
    job_type: str | None = None,
    payload: dict[str, Any] | None = None,
    *,
    queue: str | None = None,
    status: str | Sequence[str] | None = None,
    using: str | None = None,
) -> list[Job]:
    """Jobs in the table, oldest first: of ``job_type``, whose payload contains ``payload``
    (JSON containment: every key given, with the value given, nested objects likewise),
    in ``queue``, with ``status`` (one or several; default any)."""
    jobs = Job.objects.using(using or conf.DATABASE).order_by("id")
    if job_type is not None:
        jobs = jobs.filter(job_type=job_type)
    if payload is not None:
        jobs = jobs.filter(payload__contains=payload)
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    if status is not None:
        jobs = jobs.filter(status__in=[status] if isinstance(status, str) else list(status))
    return list(jobs)


def assert_enqueued(
    job_type: str,
    payload: dict[str, Any] | None = None,
    *,
    count: int | None = None,
    queue: str | None = None,
    status: str | Sequence[str] | None = None,
    using: str | None = None,
) -> list[Job]:
    """Assert that jobs matching the filters (see :func:`enqueued_jobs`) exist: exactly
    ``count`` of them, or at least one. Returns them; the failure message lists the jobs
    that were enqueued instead."""
    found = enqueued_jobs(job_type, payload, queue=queue, status=status, using=using)
    if (count is None and found) or len(found) == count:
        return found
    wanted = "at least 1" if count is None else str(count)
    raise AssertionError(
        f"expected {wanted} job(s) {_describe(job_type, payload, queue, status)}, "
        f"found {len(found)}; {_listing(using)}"
    )


def assert_not_enqueued(
    job_type: str,
    payload: dict[str, Any] | None = None,
    *,
    queue: str | None = None,
    status: str | Sequence[str] | None = None,
    using: str | None = None,
) -> None:
    """Assert that no job matches the filters (see :func:`enqueued_jobs`)."""
    found = enqueued_jobs(job_type, payload, queue=queue, status=status, using=using)
    if found:
        raise AssertionError(
            f"expected no job {_describe(job_type, payload, queue, status)}, found "
            f"{len(found)}: " + ", ".join(f"#{j.id} {j.payload!r} ({j.status})" for j in found)
        )


def _describe(
    job_type: str, payload: Any, queue: str | None, status: str | Sequence[str] | None
) -> str:
    text = f"of type {job_type!r}"
    if payload is not None:
        text += f" with a payload containing {payload!r}"
    if queue is not None:
        text += f" in queue {queue!r}"
    if status is not None:
        text += f" with status {status!r}"
    return text


def _listing(using: str | None, limit: int = 10) -> str:
    jobs = list(Job.objects.using(using or conf.DATABASE).order_by("id")[: limit + 1])
    if not jobs:
        return "no job was enqueued"
    shown = ", ".join(f"{j.job_type!r} {j.payload!r} ({j.status})" for j in jobs[:limit])
    return f"enqueued: {shown}" + (", ..." if len(jobs) > limit else "")


# --- eager mode --------------------------------------------------------------------------


@contextmanager
def eager(
    queues: Sequence[str] | None = None, *, using: str | None = None
) -> Iterator[list[JobRun]]:
    """Run jobs as soon as their enqueue is committed, for the duration of the block.

    Outside a transaction (the test's own transaction does not count) the jobs run right
    after ``enqueue_job`` returns; inside ``transaction.atomic()`` they run when it commits
    (through ``transaction.on_commit``: under pytest-django's ``db`` fixture or Django's
    ``TestCase``, wrap the code in ``django_capture_on_commit_callbacks(execute=True)`` /
    ``captureOnCommitCallbacks(execute=True)``, as for any on-commit callback). Each run is
    a :func:`drain`, so jobs those jobs enqueue run too. Yields the list of runs, which
    grows as jobs run.
    """
    alias = using or conf.DATABASE
    runs: list[JobRun] = []

    def run() -> None:
        runs.extend(drain(queues, using=alias))

    def enqueued(sender: Any, created: bool = True, **kwargs: Any) -> None:
        if not created or _draining_now():
            return  # a job's handler enqueued it: the drain running that handler takes it
        if _in_user_transaction(alias):
            transaction.on_commit(run, using=alias)
        else:
            run()

    signals.job_enqueued.connect(enqueued, weak=False)
    try:
        yield runs
    finally:
        signals.job_enqueued.disconnect(enqueued)


def _draining_now() -> bool:
    return bool(getattr(_draining, "active", 0))


def _in_user_transaction(alias: str) -> bool:
    """Whether an atomic block other than a test case's own is open."""
    blocks = connections[alias].atomic_blocks
    return any(not getattr(block, "_from_testcase", False) for block in blocks)


# --- schedules ---------------------------------------------------------------------------


def trigger_schedule(name: str, *, using: str | None = None) -> int | None:
    """Enqueue one run of the schedule ``name`` now, as the admin's "Run now" does, after
    syncing the schedules declared in code. Returns the job id, or None when the schedule's
    overlap policy skipped the run."""
    from .schedules.scheduler import trigger
    from .schedules.sync import sync_schedules

    alias = using or conf.DATABASE
    sync_schedules(alias)
    try:
        schedule = Schedule.objects.using(alias).get(name=name)
    except Schedule.DoesNotExist:
        known = ", ".join(Schedule.objects.using(alias).values_list("name", flat=True))
        raise AssertionError(f"no schedule named {name!r} (known: {known or 'none'})") from None
    return trigger(schedule.pk, alias).job_id
