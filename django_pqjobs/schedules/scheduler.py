"""The scheduler pass every worker runs, and the operator actions on schedules.

Exactly once per tick, across any number of workers: a due schedule row is locked with
``FOR UPDATE SKIP LOCKED`` and, in the same transaction, its job is inserted and its
``next_run_at`` moved past the tick. Another worker either skips the locked row or, once
the transaction committed, no longer sees it as due. The job's dedupe key
``schedule:<id>:<tick>`` is a second guard while that job is active. ``now()`` of the
database is the only clock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connections, transaction
from django.db.models.functions import Now

from ..clock import database_now
from ..conf import conf
from ..enqueue import PreparedJob, insert, prepare
from ..errors import PQJobsError
from ..models import Job, MisfirePolicy, OverlapPolicy, Schedule
from ..recurrence import ScheduleError
from ..sql import queries
from .sync import sync_schedules, timing_of

QUERIES = queries("schedules_scheduler")

logger = logging.getLogger("django_pqjobs")

PASS_LIMIT = 500  # schedules fired per pass at most; the rest wait for the next pass
BROKEN_RETRY_SECONDS = 60


@dataclass(frozen=True)
class Fired:
    """What one scheduler step did with one due schedule."""

    schedule: str
    tick: datetime
    job_id: int | None  # None: no job (skipped by the overlap or misfire policy, or error)
    reason: str  # "run", "misfire_run_once", "misfire_skip", "overlap_skip", "error"


def previous_run_active(schedule: Schedule, alias: str) -> bool:
    if schedule.last_job_id is None:
        return False
    jobs = Job.objects.using(alias).active().filter(pk=schedule.last_job_id)
    return jobs.exists()


def job_of(schedule: Schedule, dedupe_key: str | None = None) -> PreparedJob:
    """The job a run of ``schedule`` enqueues: its own queue and priority where it sets
    them, else the job type's, else ``PQJOBS``' (as any enqueue fills them in)."""
    return prepare(
        schedule.job_type,
        schedule.payload,
        queue=schedule.queue or None,
        priority=schedule.priority,
        dedupe_key=dedupe_key,
        dedupe="skip",
        schedule_id=schedule.pk,
    )


def _enqueue(schedule: Schedule, alias: str, dedupe_key: str | None) -> int:
    return insert(job_of(schedule, dedupe_key), alias)


def fire_due(alias: str | None = None, limit: int = PASS_LIMIT) -> list[Fired]:
    """Enqueue the jobs of every due schedule (one transaction per schedule)."""
    alias = alias or conf.DATABASE
    _start_new_schedules(alias)
    fired: list[Fired] = []
    for _ in range(limit):
        with transaction.atomic(using=alias):
            schedule = (
                Schedule.objects.using(alias)
                .filter(enabled=True, next_run_at__lte=Now())
                .order_by("next_run_at")
                .select_for_update(skip_locked=True, of=("self",))
                .first()
            )
            if schedule is None:
                break
            fired.append(_fire(schedule, database_now(alias), alias))
    return fired


def _start_new_schedules(alias: str) -> None:
    """Give enabled rows without ``next_run_at`` (created by code or SQL, not by the sync or
    the admin) their first tick after now."""
    with transaction.atomic(using=alias):
        rows = (
            Schedule.objects.using(alias)
            .filter(enabled=True, next_run_at__isnull=True)
            .select_for_update(skip_locked=True)
        )
        now = None
        for schedule in rows:
            now = now or database_now(alias)
            try:
                schedule.next_run_at = timing_of(schedule).next_after(now)
            except ScheduleError as exc:
                logger.error("schedule %s is broken (%s); it cannot start", schedule.name, exc)
                continue
            schedule.updated_at = now
            schedule.save(using=alias, update_fields=["next_run_at", "updated_at"])


def _fire(schedule: Schedule, now: datetime, alias: str) -> Fired:
    tick = schedule.next_run_at
    assert tick is not None
    try:
        timing = timing_of(schedule)
    except ScheduleError as exc:
        logger.error("schedule %s is broken (%s); retrying in 60 s", schedule.name, exc)
        schedule.next_run_at = now + timedelta(seconds=BROKEN_RETRY_SECONDS)
        _save(schedule, now, alias)
        return Fired(schedule.name, tick, None, "error")
    missed = (now - tick).total_seconds() > conf.SCHEDULE_MISFIRE_GRACE
    if missed:
        # Never a burst of catch-up runs: at most one run, then the first future tick.
        schedule.next_run_at = timing.next_after(now, anchor=tick)
        reason = (
            "misfire_run_once" if schedule.misfire == MisfirePolicy.RUN_ONCE else "misfire_skip"
        )
    else:
        schedule.next_run_at = timing.next_after(tick, anchor=tick)
        reason = "run"
    job_id = None
    if reason == "misfire_skip":
        logger.warning("schedule %s missed its run at %s: skipped", schedule.name, tick.isoformat())
    elif schedule.overlap == OverlapPolicy.SKIP and previous_run_active(schedule, alias):
        logger.info(
            "schedule %s: run at %s skipped, job %s is still active",
            schedule.name,
            tick.isoformat(),
            schedule.last_job_id,
        )
        reason = "overlap_skip"
    else:
        try:
            with transaction.atomic(using=alias):
                job_id = _enqueue(schedule, alias, f"schedule:{schedule.pk}:{tick.isoformat()}")
        except (PQJobsError, ValueError) as exc:
            logger.error("schedule %s could not enqueue its job: %s", schedule.name, exc)
            reason = "error"
        else:
            schedule.last_run_at = now
            schedule.last_job_id = job_id
            logger.info("schedule %s: enqueued job %s for %s", schedule.name, job_id, tick)
    _save(schedule, now, alias)
    return Fired(schedule.name, tick, job_id, reason)


def _save(schedule: Schedule, now: datetime, alias: str) -> None:
    schedule.updated_at = now
    schedule.save(
        using=alias, update_fields=["next_run_at", "last_run_at", "last_job", "updated_at"]
    )


@dataclass(frozen=True)
class Triggered:
    job_id: int | None
    message: str


def trigger(schedule_id: int, alias: str | None = None) -> Triggered:
    """Enqueue one run of a schedule now ("Run now"), respecting its overlap policy.

    Does not move ``next_run_at``. Raises ``Schedule.DoesNotExist`` for an unknown id.
    """
    alias = alias or conf.DATABASE
    with transaction.atomic(using=alias):
        schedule = Schedule.objects.using(alias).select_for_update().get(pk=schedule_id)
        if schedule.overlap == OverlapPolicy.SKIP and previous_run_active(schedule, alias):
            return Triggered(
                None,
                f"schedule {schedule.name!r}: not run, its previous job {schedule.last_job_id} "
                "is still ready or running (overlap policy 'skip')",
            )
        job_id = _enqueue(schedule, alias, None)
        schedule.last_run_at = database_now(alias)
        schedule.last_job_id = job_id
        _save(schedule, schedule.last_run_at, alias)
    return Triggered(job_id, f"schedule {schedule.name!r}: enqueued job {job_id}")


def set_enabled(schedule_ids: list[int], enabled: bool, alias: str | None = None) -> int:
    """Enable or disable schedules; enabling starts again from the next future tick (a
    paused schedule does not count its paused time as missed runs). Returns the count."""
    alias = alias or conf.DATABASE
    count = 0
    with transaction.atomic(using=alias):
        now = database_now(alias)
        rows = Schedule.objects.using(alias).select_for_update().filter(pk__in=schedule_ids)
        for schedule in rows:
            if schedule.enabled == enabled:
                continue
            schedule.enabled = enabled
            if enabled:
                try:
                    schedule.next_run_at = timing_of(schedule).next_after(now)
                except ScheduleError as exc:
                    raise ScheduleError(f"schedule {schedule.name!r}: {exc}") from None
            schedule.updated_at = now
            schedule.save(using=alias, update_fields=["enabled", "next_run_at", "updated_at"])
            count += 1
    return count


# Whether a pass has anything to do: one statement, where the pass itself takes two
# transactions of ORM queries. Every worker asks every second, busy or idle.
_ANYTHING_DUE = QUERIES["anything_due"]


class Scheduler:
    """The scheduler step of one worker's maintenance thread: sync once, then fire."""

    def __init__(self, alias: str) -> None:
        self.alias = alias
        self.synced = False

    def run_pass(self) -> list[Fired]:
        if not self.synced:
            try:
                sync_schedules(self.alias)
            except ScheduleError as exc:
                logger.error("schedules declared in code were not synced: %s", exc)
            self.synced = True
        with connections[self.alias].cursor() as cursor:
            cursor.execute(_ANYTHING_DUE)
            (due,) = cursor.fetchone()
        return fire_due(self.alias) if due else []
