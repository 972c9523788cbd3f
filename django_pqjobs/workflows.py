"""Durable workflows: a handler written as steps that survive crashes, sleeps of days that
hold no worker, and waits for a signal from outside.

Inside a handler (``ctx`` is its :class:`~django_pqjobs.JobContext`)::

    charge = ctx.step("charge", charge_card, order_id)
    ctx.sleep("reminder", timedelta(days=3))
    reply = ctx.wait_for_signal("confirmed", timeout="7d")

- A **step** runs its callable and writes its JSON result to ``pqjobs_step`` when it
  returns (its own short transaction, fenced on the attempt). When the job runs again (a
  retry, a rescue after its worker died, a wake-up), a recorded step returns its result
  without running. A step runs at least once and, once recorded, never again.
- A **sleep** or a **wait for a signal** ends the attempt: the job is *parked*
  (``waiting``, no worker, no connection, the attempt not charged) until its time comes,
  its signal is sent (:func:`send_signal`), or an operator ends the wait; it then runs
  again from the top, its recorded steps returning at once, up to where it stopped.

Steps are known by name, unique per job: code between steps runs again at each resume,
and a step renamed is a new step (see docs/guides/workflows.md, "Determinism").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from django.db import connections, transaction

from . import audit, options, protection, transitions
from .audit import AuditAction, JobAction
from .conf import conf
from .durations import FOREVER, Duration, in_words, to_seconds
from .enqueue import insert, prepare
from .errors import (
    JobExpired,
    JobFailed,
    JobNotFound,
    JobWasCancelled,
    PermanentError,
    PQJobsError,
    error_summary,
)
from .notify import notify_queues
from .protection import reveal_value
from .registry import registry
from .serialization import from_json, to_json
from .sql import queries
from .statuses import FINISHED_STATUSES
from .transitions import Fence
from .transitions.cursors import batch_cursor
from .transitions.workflows import SIGNAL_LOCK

QUERIES = queries("workflow_api")


class Running(Protocol):
    """What a workflow needs of the running job's context (a JobContext)."""

    job: Any
    using: str

    @property
    def fence(self) -> Fence: ...


T = TypeVar("T")


class Park(BaseException):
    """Raised by a sleep or a wait to end the attempt and park the job (a BaseException, so
    that a handler's ``except Exception`` does not swallow it)."""

    def __init__(self, delay: float, note: str, signal: str | None = None) -> None:
        super().__init__(note)
        self.delay = delay
        self.note = note
        self.signal = signal


class SignalTimeout(PQJobsError):
    """Raised in the handler by :meth:`JobContext.wait_for_signal` when its timeout passed
    (or an operator ended the wait) before the signal came; every later run of the job
    raises it again at that point."""

    def __init__(self, job_id: int, name: str) -> None:
        self.job_id = job_id
        self.name = name
        super().__init__(f"job {job_id}: no signal {name!r} came before the wait's timeout")


class StepResultNotSerializable(PermanentError):
    """A step returned what cannot be stored as JSON (or more than RESULT_MAX_BYTES)."""


class WorkflowLost(BaseException):
    """The attempt is no longer this worker's (rescued and claimed elsewhere): nothing more
    is recorded by it."""


@dataclass
class _Record:
    kind: str
    result: Any
    finished: bool
    remaining: float | None  # seconds until wake_at (<= 0: passed); None: no wake_at


_RECORDS = QUERIES["records"]
# A step's record: pqjobs_record_step() (sql/schema/workflows.sql), fenced on the attempt.
# On its own, a record commits without waiting for the WAL flush; inside a transaction of
# the handler's, whose commit it must not change, as that transaction commits.
_RECORD = QUERIES["record"]
_ASYNC_COMMIT = "(SELECT set_config('synchronous_commit', 'off', true)) = 'off'"
_FINISH = QUERIES["finish"]
# in a transaction -> the statement to send
_FINISHES = {
    in_transaction: _FINISH.replace("{commit}", "true" if in_transaction else _ASYNC_COMMIT)
    for in_transaction in (False, True)
}
_SIGNAL = QUERIES["signal"]
# (on the hot shelf first: a child still to run, or finished lately, is there)
_CHILD = QUERIES["child"]
_CHILD_ON_SHELVES = (_CHILD.format(shelf="shelf = 'hot' AND"), _CHILD.format(shelf=""))


class Workflow:
    """The durable state of one attempt of a job: its recorded steps, read once."""

    def __init__(self, ctx: Running) -> None:
        self.ctx = ctx
        self._records: dict[str, _Record] | None = None
        self._used: set[str] = set()
        known = registry.get(ctx.job.job_type)
        if known is not None and known.atomic:
            raise PermanentError(
                f"job type {ctx.job.job_type!r} is atomic: its steps, sleeps and waits would "
                "roll back with its failure; durable workflows need a job that is not "
                "atomic=True"
            )
        self._encrypted = known is not None and bool(known.encrypted)

    # --- the three durable operations ---------------------------------------------------

    def step(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> Any:
        found = self._take(name, "step")
        if found is not None:
            return found.result
        result = fn(*args, **kwargs)
        text = self._json(result, f"the result of step {name!r} of job {self.ctx.job.id}")
        self._write(name, "step", text, finished=True, wake=None)
        return self._open(text)

    def sleep(self, name: str, duration: Duration) -> None:
        seconds = to_seconds(duration, f"ctx.sleep({name!r}) duration")
        found = self._take(name, "sleep")
        if found is None:
            self._write(name, "sleep", None, finished=False, wake=seconds)
            raise Park(seconds, f"sleeping {in_words(seconds)} ({name})")
        if found.finished:
            return
        remaining = found.remaining or 0.0
        if remaining > 0:
            # woken early (a rescue, a retry): the rest of the sleep
            raise Park(remaining, f"sleeping {in_words(remaining)} more ({name})")
        self._finish(name, None)

    def wait_for_signal(self, name: str, timeout: Duration | None) -> Any:
        seconds = FOREVER if timeout is None else to_seconds(timeout, f"wait_for_signal({name!r})")
        found = self._take(name, "signal")
        if found is not None and found.finished:
            return self._signal_outcome(name, found.result)
        payload = self._received(name)
        if payload is not _NOTHING:
            outcome = {"received": payload}
            if found is None:
                self._write(name, "signal", self._json(outcome, name), finished=True, wake=0)
            else:
                self._finish(name, outcome)
            return self._signal_outcome(name, outcome)
        if found is None:
            self._write(name, "signal", None, finished=False, wake=seconds)
            raise Park(seconds, f"waiting for signal {name!r}", signal=name)
        remaining = found.remaining if found.remaining is not None else seconds
        if remaining > 0:
            raise Park(remaining, f"waiting for signal {name!r}", signal=name)
        self._finish(name, {"timed_out": True})
        raise SignalTimeout(self.ctx.job.id, name)

    def run_child(self, name: str, job_type: str, payload: Any, options: dict[str, Any]) -> Any:
        found = self._take(name, "child")
        if found is not None and found.finished:
            return self._child_outcome(found.result, job_type)
        if found is None:
            child_id = self._enqueue_child(name, job_type, payload, options)
        else:
            child_id = int(found.result["job_id"])
        with connections[self.ctx.using].cursor() as cursor:
            for sql in _CHILD_ON_SHELVES:
                cursor.execute(sql, [child_id])
                row = cursor.fetchone()
                if row is not None:
                    break
        if row is None:
            raise PermanentError(
                f"job {self.ctx.job.id}: its child job {child_id} ({name!r}) is gone (deleted "
                "or pruned before it was read)"
            )
        status, result, error_type, error = row
        if status not in FINISHED_STATUSES:
            raise Park(FOREVER, f"waiting for child job {child_id} ({name})")
        outcome = {
            "job_id": child_id,
            "status": status,
            "result": from_json(result),
            "error_type": error_type,
            # its error's message, not its traceback (which stays on the child's page)
            "error": error_summary(error_type, error),
        }
        self._finish(name, outcome)
        return self._child_outcome(outcome, job_type)

    def _enqueue_child(
        self, name: str, job_type: str, payload: Any, options: dict[str, Any]
    ) -> int:
        # the child and the record of it commit together: a crash between them would
        # enqueue it again at the next run
        with transaction.atomic(using=self.ctx.using):
            child = prepare(job_type, payload, parent_id=self.ctx.job.id, **options)
            child_id = insert(child, self.ctx.using)
            self._write(
                name, "child", self._json({"job_id": child_id}, name), finished=False, wake=None
            )
        return int(child_id)

    def _child_outcome(self, outcome: Any, job_type: str) -> Any:
        child_id, status = int(outcome["job_id"]), outcome["status"]
        if status == "done":
            return reveal_value(outcome["result"], f"the result of job {child_id}", job_type)
        error = {"failed": JobFailed, "cancelled": JobWasCancelled, "expired": JobExpired}
        error_type = outcome["error_type"]
        raise error[status](
            child_id, status, error_type, error_summary(error_type, outcome["error"])
        )

    # --- the records --------------------------------------------------------------------

    def _take(self, name: str, kind: str) -> _Record | None:
        """The record of ``name`` from an earlier run, if any (and the name taken: a name
        used twice in one run is refused, the second time)."""
        options.job_type_name(name, "a step's name")
        if name in self._used:
            raise PermanentError(
                f"job {self.ctx.job.id}: the step name {name!r} is used twice; the steps, "
                "sleeps and waits of a job need names of their own"
            )
        self._used.add(name)
        found = self._load().get(name)
        if found is not None and found.kind != kind:
            raise PermanentError(
                f"job {self.ctx.job.id}: {name!r} was a {found.kind} in an earlier run and is "
                f"a {kind} now (a step renamed or reordered since?); see the workflows "
                "guide, Determinism"
            )
        return found

    def _load(self) -> dict[str, _Record]:
        if self._records is None:
            with connections[self.ctx.using].cursor() as cursor:
                cursor.execute(_RECORDS, [self.ctx.job.id])
                rows = cursor.fetchall()
            self._records = {
                name: _Record(kind, None if text is None else self._open(text), done, left)
                for name, kind, text, done, left in rows
            }
        return self._records

    def _write(
        self, name: str, kind: str, text: str | None, *, finished: bool, wake: float | None
    ) -> None:
        # a step's one statement, on the thread's kept psycopg cursor (Django's cursor
        # wrapper, made anew each time, cost a no-op step a third of its time)
        fence = self.ctx.fence
        in_transaction = connections[self.ctx.using].in_atomic_block
        with batch_cursor(self.ctx.using) as cursor:
            cursor.execute(
                _RECORD,
                (
                    fence.job_id,
                    fence.worker_id,
                    fence.attempt,
                    name,
                    kind,
                    text,
                    finished,
                    wake,
                    not in_transaction,
                ),
            )
            if not cursor.fetchone()[0]:
                raise WorkflowLost(f"job {fence.job_id} is no longer this worker's attempt")

    def _finish(self, name: str, outcome: Any) -> None:
        fence = self.ctx.fence
        text = None if outcome is None else self._json(outcome, name)
        connection = connections[self.ctx.using]
        with connection.cursor() as cursor:
            cursor.execute(
                _FINISHES[connection.in_atomic_block],
                {
                    "job": fence.job_id,
                    "name": name,
                    "result": text,
                    "attempt": fence.attempt,
                    "worker": fence.worker_id,
                },
            )
            if cursor.fetchone() is None:
                raise WorkflowLost(f"job {fence.job_id} is no longer this worker's attempt")

    def _received(self, name: str) -> Any:
        with connections[self.ctx.using].cursor() as cursor:
            cursor.execute(_SIGNAL, [self.ctx.job.id, name])
            row = cursor.fetchone()
        return _NOTHING if row is None else (None if row[0] is None else self._open(row[0]))

    def _signal_outcome(self, name: str, outcome: Any) -> Any:
        if isinstance(outcome, dict) and "received" in outcome:
            return outcome["received"]
        raise SignalTimeout(self.ctx.job.id, name)

    def _json(self, value: Any, what: str) -> str:
        try:
            text = to_json(value, what, conf.RESULT_MAX_BYTES, "PQJOBS['RESULT_MAX_BYTES']")
        except ValueError as exc:
            raise StepResultNotSerializable(str(exc)) from None
        if self._encrypted:
            text = protection.seal(text, what, self.ctx.job.job_type)
        return text

    def _open(self, text: str) -> Any:
        job = self.ctx.job
        return protection.reveal(from_json(text), f"a step of job {job.id}", job.job_type)


_NOTHING = object()


def send_signal(
    job_id: int,
    name: str,
    payload: Any = None,
    *,
    by: str | None = None,
    using: str | None = None,
) -> bool:
    """Send the signal ``name`` (with ``payload``, any JSON value) to job ``job_id``: its
    ``ctx.wait_for_signal(name)`` returns ``payload``, and a job parked waiting for it
    wakes now. In the caller's transaction: rolled back, it was never sent.

    One signal of a name per job: returns True when this one was recorded, False when the
    job already had it (the first one stands). A signal sent before the job waits for it
    is kept until it does. With ``by``, the signal is recorded in the audit trail under
    that name (an operator's). Raises :class:`~django_pqjobs.JobNotFound` for no such job.
    """
    options.job_type_name(name, "signal name")
    actor = None if by is None else options.actor(by)
    alias = using or conf.DATABASE
    with transaction.atomic(using=alias), connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT pg_advisory_xact_lock({SIGNAL_LOCK})", [job_id])
        cursor.execute(QUERIES["job_type_of"], [job_id])
        row = cursor.fetchone()
        if row is None:
            raise JobNotFound(job_id)
        what = f"the payload of signal {name!r} to job {job_id}"
        text = to_json(payload, what, conf.PAYLOAD_MAX_BYTES, "PQJOBS['PAYLOAD_MAX_BYTES']")
        known = registry.get(row[0])
        if known is not None and known.encrypted:
            text = protection.seal(text, what, known.name)
        cursor.execute(
            QUERIES["add_signal"],
            [job_id, name, text],
        )
        if cursor.fetchone() is None:
            return False
        queue = transitions.wake_for_signal(cursor, job_id, name)
        if queue is not None:
            notify_queues(cursor, [queue])
        if actor is not None:
            woke = "; the job was waiting for it: ready" if queue is not None else ""
            audit.record_jobs(
                alias, AuditAction.SIGNAL, actor, [JobAction(job_id, None, f"{name!r}{woke}")]
            )
    return True
