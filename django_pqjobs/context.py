"""What a handler receives: the job, its attempt, and helpers to chain, report and stop."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connections

from .errors import JobCancelled

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper

    from .models import Job

logger = logging.getLogger("django_pqjobs")

PROGRESS_MIN_INTERVAL = 1.0


@dataclass
class JobContext:
    """Passed to every handler.

    - ``job``: the :class:`~django_pqjobs.models.Job` (``ctx.job.payload`` is its payload).
    - ``worker_id`` and ``attempt`` (1 on the first run).
    - ``using``: the database alias of the job tables; ``connection`` is its connection.
    - ``enqueue(...)``: enqueue a follow-up job (recorded as this job's child).
    - ``set_progress(done, total=None, message="")``: progress shown in the admin.
    - ``cancelled`` / ``raise_if_cancelled()``: whether an operator asked to cancel.
    """

    job: Job
    worker_id: str
    attempt: int
    using: str
    # A plain flag, not an Event: set by the worker's threads, read by the handler; nothing
    # waits on it, and an Event per job cost more than running a no-op job.
    _cancel_requested: bool = field(default=False, repr=False)
    _last_progress_write: float = field(default=0.0, repr=False)
    _pending_progress: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        """The Django connection of the job database, in this executor thread."""
        return connections[self.using]

    @property
    def logger(self) -> logging.Logger:
        return logger

    def enqueue(self, job_type: str, payload: Any = None, **options: Any) -> int:
        """Enqueue a follow-up job; in an atomic job it commits with this job's outcome."""
        from .enqueue import insert, prepare

        options.setdefault("using", self.using)
        using = options.pop("using")
        return insert(prepare(job_type, payload, parent_id=self.job.id, **options), using)

    @property
    def cancelled(self) -> bool:
        """True once an operator asked to cancel this job (seen within one heartbeat)."""
        return self._cancel_requested

    def raise_if_cancelled(self) -> None:
        """Stop the handler here if cancellation was requested; the job ends ``cancelled``."""
        if self._cancel_requested:
            raise JobCancelled(f"job {self.job.id} was cancelled")

    def set_progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Record progress; writes to the database at most once a second."""
        self._pending_progress = {"done": done, "total": total, "message": str(message)[:500]}
        now = time.monotonic()
        if now - self._last_progress_write >= PROGRESS_MIN_INTERVAL:
            self.flush_progress()

    def flush_progress(self) -> None:
        if self._pending_progress is None:
            return
        from .worker import queries

        queries.save_progress(
            self.using, self.job.id, self.worker_id, self.attempt, self._pending_progress
        )
        self.job.progress = self._pending_progress
        self._pending_progress = None
        self._last_progress_write = time.monotonic()
