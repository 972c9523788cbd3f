"""Claiming jobs for this worker: the claim transition, then a ``Job`` built from each row.

Rows are decoded one at a time. The claim has already committed when they are decoded, so
a row the worker cannot read (a payload nested past the decoder's limit, a run time
outside Python's calendar) must not take the rest of the batch down with it: it is
returned apart, to be failed at once with the reason.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db.models.base import ModelState
from django.utils import timezone

from .. import transitions
from ..models import Job
from ..outcomes import Outcome, describe
from ..statuses import AttemptOutcome
from ..transitions import Fence

ToDatetime = Callable[[float | None], datetime | None]


def _aware(epoch: float | None) -> datetime | None:
    return None if epoch is None else datetime.fromtimestamp(epoch, UTC)


def _naive(epoch: float | None) -> datetime | None:
    """What Django returns with ``USE_TZ = False``: naive, in the default time zone."""
    return None if epoch is None else timezone.make_naive(datetime.fromtimestamp(epoch, UTC))


def _once_per_value(convert: ToDatetime) -> ToDatetime:
    """``convert``, computed once per distinct value: the rows of one claim share their
    claim time, and jobs enqueued to run now have equal creation and run times."""
    seen: dict[float | None, datetime | None] = {None: None}

    def converted(epoch: float | None) -> datetime | None:
        try:
            return seen[epoch]
        except KeyError:
            value = seen[epoch] = convert(epoch)
            return value

    return converted


def _json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def build_job(row: tuple[Any, ...], worker_id: str, alias: str, to_datetime: ToDatetime) -> Job:
    """A Job built straight from a claim row (columns of ``transitions.CLAIM_COLUMNS``).

    Without ``Model.__init__``, the way Django's own unpickling builds instances: its
    defaults, descriptors and signals took longer than running a no-op job. Every concrete
    field is set, so nothing is deferred and reading a field never queries.
    """
    locked_at = to_datetime(row[17])
    state = ModelState()
    state.adding = False
    state.db = alias
    job = Job.__new__(Job)
    job.__dict__.update(
        _state=state,
        id=row[0],
        job_type=row[1],
        queue=row[2],
        payload=json.loads(row[3]),
        status="running",
        priority=row[4],
        attempts=row[5],
        max_attempts=row[6],
        timeout_seconds=row[7],
        dedupe_key=row[8],
        parent_id=row[9],
        schedule_id=row[10],
        last_error=row[11],
        error_type=row[12],
        result=_json(row[13]),
        duration_ms=row[14],
        progress=_json(row[15]),
        run_after=to_datetime(row[16]),
        locked_at=locked_at,
        locked_by=worker_id,
        heartbeat_at=locked_at,
        updated_at=locked_at,
        created_at=to_datetime(row[18]),
        finished_at=to_datetime(row[19]),
        cancel_requested_at=to_datetime(row[20]),
        started_at=to_datetime(row[21]),
        concurrency_key=row[22],
        concurrency_limit=row[23],
        rate_key=row[24],
        rate_limit=row[25],
        rate_period=row[26],
        blocked_by=None,
        trace_context=_json(row[27]),
        retried_from=row[28],
        batch_id=row[29],
        callback_of_id=row[30],
        waiting_for=row[31],
        on_dependency_failure=row[32],
        has_dependents=row[33],
        waited_on=row[34],
    )
    return job


@dataclass(frozen=True)
class Undecodable:
    """A claimed row the worker could not turn into a Job: it fails at once, alone."""

    fence: Fence
    job_type: str
    error_type: str
    error: str

    def job(self) -> Job:
        """What is known of the job: enough to record and announce its failure."""
        return Job(
            id=self.fence.job_id,
            job_type=self.job_type,
            status="running",
            attempts=self.fence.attempt,
            locked_by=self.fence.worker_id,
        )

    def outcome(self) -> Outcome:
        return Outcome.failure(
            AttemptOutcome.PERMANENT, self.error_type, self.error, final="failed"
        )


@dataclass
class ClaimBatch:
    jobs: list[Job] = field(default_factory=list)
    undecodable: list[Undecodable] = field(default_factory=list)
    blocked: int = 0  # due jobs flow control held back instead of claiming
    tids: dict[int, str] = field(default_factory=dict)  # job id -> where its row lies

    def __len__(self) -> int:
        return len(self.jobs) + len(self.undecodable)


def claim_jobs(
    alias: str,
    worker_id: str,
    queues: Sequence[str] | None,
    limit: int,
    min_priority: int | None = None,
) -> ClaimBatch:
    """Claim up to ``limit`` due jobs (of at least ``min_priority``) and build them;
    undecodable rows come back apart."""
    claimed = transitions.claim(alias, worker_id, queues, limit, min_priority)
    to_datetime = _once_per_value(_aware if settings.USE_TZ else _naive)
    batch = ClaimBatch(blocked=claimed.blocked)
    for row in claimed.rows:
        batch.tids[row[0]] = row[35]
        try:
            batch.jobs.append(build_job(row, worker_id, alias, to_datetime))
        except (ValueError, OverflowError, OSError, RecursionError) as exc:
            batch.undecodable.append(
                Undecodable(
                    Fence(int(row[0]), worker_id, int(row[5])),
                    str(row[1]),
                    "UndecodableJob",
                    f"the worker could not read this job's row ({type(exc).__name__}: "
                    f"{str(exc)[:300]}); it was failed without running\n\n{describe(exc)}",
                )
            )
    return batch
