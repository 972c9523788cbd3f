"""What a handler receives: the job, its attempt, and helpers to chain, report and stop."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db import connections

from . import transitions
from .durations import Duration
from .enqueue import insert, prepare
from .errors import JobCancelled
from .options import finite_number
from .protection import reveal_value
from .serialization import from_json, storable_text, to_json
from .sql import queries
from .transitions import Fence
from .workflows import Workflow

QUERIES = queries("context")

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from typing_extensions import Unpack

    from .enqueue import EnqueueOptions
    from .models import Batch, Job

logger = logging.getLogger("django_pqjobs")

# The context of the job whose handler runs in this thread (or task), for code the handler
# calls without passing it: a task of Django's Tasks framework (job_context()).
_running: ContextVar[JobContext | None] = ContextVar("pqjobs_running_job", default=None)

PROGRESS_MIN_INTERVAL = 1.0
PROGRESS_MESSAGE_LIMIT = 500


@dataclass
class JobContext:
    """Passed to every handler.

    - ``job``: the :class:`~django_pqjobs.models.Job` (``ctx.job.payload`` is its payload).
    - ``worker_id`` and ``attempt`` (1 on the first run).
    - ``using``: the database alias of the job tables; ``connection`` is its connection.
    - ``enqueue(...)``: enqueue a follow-up job (recorded as this job's child).
    - ``set_progress(done, total=None, message="")``: progress shown in the admin.
    - ``cancelled`` / ``raise_if_cancelled()``: whether an operator asked to cancel.
    - ``batch``: the batch this job is a member or a callback of (with its counts), or None.
    - ``dependency_results()``: the results of the jobs this one depended on, by id.
    - ``step(name, fn, *args)``, ``sleep(name, duration)``, ``wait_for_signal(name)``: a
      durable workflow's steps and waits (``workflows.py``, docs/guides/workflows.md).
    """

    job: Job
    worker_id: str
    attempt: int
    using: str
    # A plain flag, not an Event: set by the worker's threads, read by the handler; nothing
    # waits on it, and an Event per job cost more than running a no-op job.
    _cancel_requested: bool = field(default=False, repr=False)
    _last_progress_write: float = field(default=0.0, repr=False)
    _pending_progress: str | None = field(default=None, repr=False)
    _workflow: Workflow | None = field(default=None, repr=False)

    @property
    def connection(self) -> BaseDatabaseWrapper:
        """The Django connection of the job database, in this executor thread."""
        return connections[self.using]

    @property
    def logger(self) -> logging.Logger:
        return logger

    def enqueue(
        self,
        job_type: str,
        payload: Any = None,
        *,
        using: str | None = None,
        **options: Unpack[EnqueueOptions],
    ) -> int:
        """Enqueue a follow-up job, recorded as this job's child; returns its id.

        Takes the options of :func:`~django_pqjobs.enqueue_job`. In an atomic job the new
        job commits or rolls back with this job's own work.
        """
        job = prepare(job_type, payload, parent_id=self.job.id, **options)
        return insert(job, using or self.using)

    @property
    def batch(self) -> Batch | None:
        """The :class:`~django_pqjobs.models.Batch` this job is a member of, or whose finish
        enqueued it (a callback), read now; None for a job of no batch."""
        from .models import Batch  # the app registry is ready by the time handlers run

        batch_id = self.job.batch_id or self.job.callback_of_id
        if batch_id is None:
            return None
        return Batch.objects.using(self.using).filter(pk=batch_id).first()

    def dependency_results(self) -> dict[int, Any]:
        """The results of this job's dependencies, by job id (``None`` for one that did
        not succeed — under ``on_dependency_failure="run"`` — or returned nothing). A
        dependency pruned meanwhile is missing."""
        with self.connection.cursor() as cursor:
            cursor.execute(
                QUERIES["dependency_results"],
                [self.job.id],
            )
            rows = cursor.fetchall()
        # results of encrypted types are opened for the handler
        return {
            int(job_id): reveal_value(from_json(text), f"the result of job {job_id}", job_type)
            for job_id, text, job_type in rows
        }

    # --- durable workflows (workflows.py) ---------------------------------------------------

    @property
    def fence(self) -> Fence:
        """This attempt: the job, this worker, the attempt number."""
        return Fence(self.job.id, self.worker_id, self.attempt)

    def step(
        self, name: str, fn: Callable[..., Any] | None = None, /, *args: Any, **kwargs: Any
    ) -> Any:
        """Run ``fn(*args, **kwargs)`` once for this job, as its step ``name``, and return
        its result (any JSON value). When the job runs again (a retry, a rescue, a wake-up
        after a sleep or a wait), a step it recorded returns that result, decoded from JSON,
        without running. Names are unique per job. Its exception ends the attempt as any
        handler's does (the job's retry policy); a result that is not JSON fails the job
        (``StepResultNotSerializable``).

        Without ``fn``, a decorator: ``@ctx.step("charge")`` over a function of no
        arguments runs it as the step and binds the function's name to its result.
        """
        if fn is None:
            return lambda decorated: self._durable().step(name, decorated)
        return self._durable().step(name, fn, *args, **kwargs)

    def sleep(self, name: str, duration: Duration) -> None:
        """Sleep durably: the attempt ends here and the job is parked (``waiting``, holding
        no worker and no connection, the attempt not charged) for ``duration`` (a
        timedelta, seconds or ``"3d"``); then it runs again from the top, its recorded
        steps returning at once, and goes on past this sleep."""
        self._durable().sleep(name, duration)

    def wait_for_signal(self, name: str, *, timeout: Duration | None = None) -> Any:
        """Wait durably for the signal ``name`` (sent by :func:`~django_pqjobs.send_signal`,
        before or after this call) and return its payload. The job is parked meanwhile, as
        by :meth:`sleep`. After ``timeout`` (none: wait for ever) it raises
        :class:`~django_pqjobs.SignalTimeout` here, and at every later run of the job."""
        return self._durable().wait_for_signal(name, timeout)

    def run_child(
        self,
        name: str,
        job_type: str,
        payload: Any = None,
        **options: Unpack[EnqueueOptions],
    ) -> Any:
        """Enqueue ``job_type`` once, as this job's child (the step ``name``), and return its
        result when it is done, parking this job meanwhile. A child that failed, was
        cancelled or expired raises ``JobFailed`` (``JobWasCancelled``, ``JobExpired``)
        here, at this run and every later one. ``options`` are ``enqueue_job``'s."""
        return self._durable().run_child(name, job_type, payload, dict(options))

    def enter(self) -> Token[JobContext | None]:
        """Make this the context :func:`job_context` returns (the worker, around a call of
        the handler); ``leave`` with what it returns."""
        return _running.set(self)

    @staticmethod
    def leave(token: Token[JobContext | None]) -> None:
        _running.reset(token)

    def _durable(self) -> Workflow:
        if self._workflow is None:
            self._workflow = Workflow(self)
        return self._workflow

    @property
    def cancelled(self) -> bool:
        """True once an operator asked to cancel this job (seen within one heartbeat)."""
        return self._cancel_requested

    def request_cancel(self) -> None:
        """Called by the worker when it sees a cancel request for this job."""
        self._cancel_requested = True

    def raise_if_cancelled(self) -> None:
        """Stop the handler here if cancellation was requested; the job ends ``cancelled``."""
        if self._cancel_requested:
            raise JobCancelled(f"job {self.job.id} was cancelled")

    def set_progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Record progress (shown in the admin); written at most once a second.

        ``done`` and ``total`` must be finite numbers; ``message`` is cut to 500
        characters. Raises :class:`~django_pqjobs.InvalidJobOption` for a bad value.
        """
        progress = {
            "done": finite_number(done, "set_progress() done"),
            "total": None if total is None else finite_number(total, "set_progress() total"),
            "message": storable_text(str(message))[:PROGRESS_MESSAGE_LIMIT],
        }
        self._pending_progress = to_json(progress, "progress")
        if time.monotonic() - self._last_progress_write >= PROGRESS_MIN_INTERVAL:
            self.flush_progress()

    def progress_json(self) -> str | None:
        """Progress reported since the last write, as stored JSON (None if none)."""
        return self._pending_progress

    def flush_progress(self) -> None:
        """Write pending progress now."""
        if self._pending_progress is None:
            return
        transitions.save_progress(self.using, self.fence, self._pending_progress)
        self.job.progress = from_json(self._pending_progress)
        self._pending_progress = None
        self._last_progress_write = time.monotonic()


def job_context() -> JobContext:
    """The :class:`JobContext` of the job whose handler is running here: for code the
    handler calls without passing ``ctx`` along, such as a task of Django's Tasks
    framework (whose function gets no JobContext) that uses durable steps::

        @task
        def fulfil(order_id: int) -> None:
            ctx = job_context()
            ctx.step("charge", charge_card, order_id)

    Raises :class:`RuntimeError` outside a handler (and in an ``async def`` one, whose
    steps are not supported)."""
    found = _running.get()
    if found is None:
        raise RuntimeError("job_context() is called outside a job's handler")
    return found
