"""The fence of an attempt: which worker holds which attempt of which job."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..models import Job


@dataclass(frozen=True)
class Fence:
    """One claimed attempt: which worker holds which attempt of which job.

    Every transition out of ``running`` applies only while the row still matches it.
    """

    job_id: int
    worker_id: str
    attempt: int
    # Where the row lay when this attempt was claimed ("(page,item)"), if known: the
    # completion looks there first (see pqjobs_complete()). A hint, not part of the fence.
    tid: str | None = field(default=None, compare=False)

    @classmethod
    def of(cls, job: Job, tid: str | None = None) -> Fence:
        assert job.locked_by is not None
        return cls(job.id, job.locked_by, job.attempts, tid)
