"""Claiming jobs for this worker: the claim transition, then a ``Job`` built from each row.

Rows are decoded one at a time. The claim has already committed when they are decoded, so
a row the worker cannot read (a payload nested past the decoder's limit, a run time
outside Python's calendar) must not take the rest of the batch down with it: it is
returned apart, to be failed at once with the reason.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.db.models.base import ModelState
from django.utils import timezone

from .. import transitions
from ..models import Job
from ..statuses import FailureKind
from ..transitions import Fence
from ..verdicts import Verdict, describe

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


# What the claim does not return, because the claim itself decided it.
_SET_BY_THE_CLAIM = frozenset(
    {"status", "locked_by", "heartbeat_at", "updated_at", "blocked_by", "fair_turn"}
)
# Columns of the claim that are not fields of a job.
_ROW_TID, _BLOCKED = "row_tid", "blocked_count"


@dataclass(frozen=True)
class Layout:
    """How the columns of a claim (named by pqjobs_claim()'s RETURNS TABLE, the one
    declaration of a claimed row) become a Job's fields, by name: taken as they are,
    decoded from JSON text, or from epoch seconds, as the model's field says.

    Timestamps travel as epoch seconds: Django's timestamptz loader is pure Python and cost
    more per claimed job than everything else in the claim; a float8 holds today's epoch to
    a quarter of a microsecond. JSON travels as text, decoded one job at a time.
    """

    # (row, to_datetime, state, worker_id) -> the Job: compiled once per layout from the
    # names, a keyword per field (filling the instance's dict field by field, or from a
    # dict built first, cost a claimed job a third more)
    build: Callable[[Sequence[Any], ToDatetime, ModelState, str], Job]
    id: int
    job_type: int
    attempts: int
    tid: int


@functools.lru_cache(maxsize=8)
def layout(columns: tuple[str, ...]) -> Layout:
    """The layout of a claim's columns; RuntimeError when they and the Job model disagree
    (a migration not applied): a job built from such a row would query the missing fields."""
    fields = {f.attname: f for f in Job._meta.concrete_fields}
    entries = []
    for index, name in enumerate(columns):
        if name in (_ROW_TID, _BLOCKED):
            continue
        found = fields.get(name)
        if found is None:
            raise RuntimeError(f"the claim returns {name!r}, which is no field of a job")
        if name == "locked_at":
            entries.append("locked_at=locked_at")
        elif isinstance(found, models.DateTimeField):
            entries.append(f"{name}=to_datetime(row[{index}])")
        elif isinstance(found, models.JSONField):
            entries.append(f"{name}=_json(row[{index}])")
        else:
            entries.append(f"{name}=row[{index}]")
    missing = set(fields) - set(columns) - _SET_BY_THE_CLAIM
    if missing:
        raise RuntimeError(
            f"the claim returns no {', '.join(sorted(missing))}: pqjobs_claim() is older or "
            "newer than this code (run `manage.py migrate`)"
        )
    source = (
        "def build(row, to_datetime, state, worker_id):\n"
        f"    locked_at = to_datetime(row[{columns.index('locked_at')}])\n"
        "    job = new(Job)\n"
        f"    job.__dict__.update(_state=state, {', '.join(entries)}, status='running', "
        "locked_by=worker_id, heartbeat_at=locked_at, updated_at=locked_at, blocked_by=None, "
        "fair_turn=None)\n"
        "    return job\n"
    )
    namespace: dict[str, Any] = {"_json": _json, "Job": Job, "new": Job.__new__}
    exec(source, namespace)
    return Layout(
        build=namespace["build"],
        id=columns.index("id"),
        job_type=columns.index("job_type"),
        attempts=columns.index("attempts"),
        tid=columns.index(_ROW_TID),
    )


def build_job(
    row: Sequence[Any], shape: Layout, worker_id: str, alias: str, to_datetime: ToDatetime
) -> Job:
    """A Job built straight from a claim row, every field set by name (``shape``).

    Without ``Model.__init__``, the way Django's own unpickling builds instances: its
    defaults, descriptors and signals took longer than running a no-op job. Every concrete
    field is set, so nothing is deferred and reading a field never queries.
    """
    state = ModelState()
    state.adding = False
    state.db = alias
    return shape.build(row, to_datetime, state, worker_id)


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

    def verdict(self) -> Verdict:
        return Verdict.of_failure(FailureKind.PERMANENT, self.error_type, self.error, then="failed")


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
    connection: Any = None,
) -> ClaimBatch:
    """Claim up to ``limit`` due jobs (of at least ``min_priority``) and build them;
    undecodable rows come back apart. ``connection``: see ``transitions.claim``."""
    claimed = transitions.claim(
        alias, worker_id, queues, limit, min_priority, connection=connection
    )
    batch = ClaimBatch(blocked=claimed.blocked)
    if not claimed.rows:
        return batch
    shape = layout(claimed.columns)
    to_datetime = _once_per_value(_aware if settings.USE_TZ else _naive)
    for row in claimed.rows:
        batch.tids[row[shape.id]] = row[shape.tid]
        try:
            batch.jobs.append(build_job(row, shape, worker_id, alias, to_datetime))
        except (ValueError, OverflowError, OSError, RecursionError) as exc:
            batch.undecodable.append(
                Undecodable(
                    Fence(int(row[shape.id]), worker_id, int(row[shape.attempts])),
                    str(row[shape.job_type]),
                    "UndecodableJob",
                    f"the worker could not read this job's row ({type(exc).__name__}: "
                    f"{str(exc)[:300]}); it was failed without running\n\n{describe(exc)}",
                )
            )
    return batch
