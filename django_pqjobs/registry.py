"""Job types: a handler and its per-type options (:class:`JobType`), and the registry of
them. The ``@job`` decorator that declares one is ``decorator.py``'s."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from . import protection, specification
from .arguments import Arguments, Mismatch
from .errors import JobTypeAlreadyRegistered, PermanentError, Snooze
from .keys import KeyTemplate
from .options import Dedupe, Isolation, Rate, WaitingFull
from .policies import BackoffPolicy
from .recurrence import ScheduleSpec

if TYPE_CHECKING:
    from .models import Job

# A handler takes a JobContext and returns its result (``context.py`` imports this module
# through ``enqueue``, so the type is not spelled out here).
Handler = Callable[..., Any]

# A job whose payload a newer deploy wrote snoozes this long (not charged as an attempt)
# while workers of the older code still run; PQJOBS["SNOOZE_LIMIT"] bounds how often.
VERSION_SNOOZE = 30.0


@dataclass(frozen=True)
class JobType:
    """A registered handler and the options its jobs get unless ``enqueue_job`` overrides them.

    ``None`` for an option means "use the global ``PQJOBS`` default at enqueue/run time".
    """

    name: str
    handler: Handler
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    timeout: float | None = None
    backoff: BackoffPolicy | None = None
    dedupe: Dedupe | None = None
    unique_for: float | None = None
    unique_states: int | None = None  # mask, options.UNIQUE_STATE_BITS
    unique_by: str | tuple[str, ...] | None = None
    debounce: float | None = None
    debounce_max: float | None = None
    expires_in: float | None = None
    sequence: KeyTemplate | None = None
    sequence_on_failure: str | None = None  # "halt" | "continue"; None: the setting's
    fair_key: KeyTemplate | None = None  # workers share out the type's jobs by this key
    atomic: bool = False
    # payload and result encrypted at rest, or the payload fields named (protection.py)
    encrypted: protection.Encrypted = False
    version: int | None = None  # the payload's shape; None: 1
    upgrade: Callable[[Any, int], Any] | None = None  # (payload, its version) -> current shape
    isolation: Isolation | None = None
    memory_limit: int | None = None
    schedule: ScheduleSpec | None = None
    concurrency: int | None = None
    concurrency_key: KeyTemplate | None = None
    rate: Rate | None = None
    rate_key: KeyTemplate | None = None
    max_waiting: int | None = None
    when_waiting_full: WaitingFull = "refuse"
    # For integrations (the Tasks framework's ``task_finished``): called in the worker with
    # (job, outcome) after each attempt of this type is recorded, as ``job_finished`` is
    # sent. A receiver of that signal is called for every job of every type; this only for
    # the type's own.
    on_finished: Callable[[Job, str], None] | None = None
    # The handler's typed arguments (its second parameter's annotation), if it has any.
    arguments: Arguments | None = None

    @cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    def call(self, ctx: Any) -> Any:
        """Call the handler: with the context alone, or also with the job's payload rebuilt
        as its typed arguments (a payload that does not fit fails the job for good, the
        field named). An encrypted type's payload is opened first (a clear one, or one no
        key opens, fails the job for good); one written for an older version of the type
        is upgraded."""
        job = ctx.job
        if self.encrypted:
            job.payload = self._opened(job)
        if (job.payload_version or 1) != (self.version or 1):
            job.payload = self._upgraded(job)
        token = ctx.enter()  # job_context() is this context while the handler runs
        try:
            if self.arguments is None:
                return self.handler(ctx)
            try:
                args = self.arguments.from_payload(ctx.job.payload)
            except Mismatch as exc:
                misfit = exc.describe(self.encrypted)
            else:
                return self.handler(ctx, args)
            # raised outside the except block: no exception quoting the value is its context
            raise PermanentError(f"the payload does not fit {self.arguments.name}: {misfit}")
        finally:
            ctx.leave(token)

    @cached_property
    def declared(self) -> dict[str, Any]:
        """The options this type declared (read once: every enqueue checks its own options
        against them)."""
        return specification.declared_by(self)

    def _opened(self, job: Any) -> Any:
        payload = job.payload
        if self.encrypted is True and protection.is_sealed(payload):  # the usual case, quickly
            return protection.open_token(
                payload[protection.ENVELOPE], f"the payload of job {job.id}", self.name
            )
        if not protection.is_protected(payload, self.encrypted):
            raise protection.SealedError(
                f"job type {self.name!r} is encrypted, but the payload of job {job.id} is "
                "stored in clear (enqueued from SQL, or before the type was encrypted): "
                "refused, so that no payload of an encrypted type is ever handled unread"
            )
        return protection.reveal_value(job.payload, f"the payload of job {job.id}", self.name)

    def _upgraded(self, job: Any) -> Any:
        """The payload of a job written for another version of this type, in the current
        shape (see docs/guides/writing-jobs.md#versioned-payloads)."""
        written, current = job.payload_version or 1, self.version or 1
        where = f"the payload of job {job.id} (job type {self.name!r})"
        if written > current:
            # a newer deploy wrote it while this worker still runs the older code
            raise Snooze(
                VERSION_SNOOZE,
                f"{where} is version {written}, newer than this worker's {current}: left for "
                "a worker running the newer code",
            )
        if self.upgrade is None:
            raise PermanentError(
                f"{where} is version {written}; the type is at version {current} and "
                "declares no upgrade= to bring it there"
            )
        failed = f"upgrading {where} from version {written} to {current} failed"
        try:
            upgraded = self.upgrade(job.payload, written)
        except Exception as exc:
            if not self.encrypted:
                raise PermanentError(f"{failed}: {type(exc).__name__}: {exc}") from exc
            # The upgrade's exception may quote the payload it was given, which is encrypted
            # at rest: named by its type alone, and not kept (its text would be the
            # traceback's), the PermanentError raised outside this block.
            refused = type(exc).__name__
        else:
            job.payload_version = current
            return upgraded
        raise PermanentError(
            f"{failed}: {refused} (its message is not shown: the payload is encrypted at rest)"
        )

    @property
    def dotted_path(self) -> str:
        return f"{self.handler.__module__}.{self.handler.__qualname__}"


Resolver = Callable[[str], "JobType | None"]


class Registry:
    """Maps job type names to :class:`JobType`. Thread-safe for registration.

    Job types are registered by ``@job`` when their module is imported. A *resolver*
    (see :meth:`add_resolver`) may supply job types that are not registered yet when a
    worker meets them, e.g. a task of Django's Tasks framework whose module no ``jobs``
    autodiscovery imported.
    """

    def __init__(self) -> None:
        self._types: dict[str, JobType] = {}
        self._resolvers: list[Resolver] = []
        self._lock = threading.Lock()

    def add_resolver(self, resolver: Resolver) -> None:
        """Ask ``resolver(name)`` for job types that are not registered (once per name it
        resolves: what it returns is registered)."""
        with self._lock:
            if resolver not in self._resolvers:
                self._resolvers.append(resolver)

    def resolve(self, name: str) -> JobType | None:
        """The registered job type ``name``, else the first a resolver supplies, else None."""
        found = self._types.get(name)
        if found is not None or not self._resolvers:
            return found
        for resolver in list(self._resolvers):
            found = resolver(name)
            if found is not None:
                self.register(found)
                return found
        return None

    def register(self, job_type: JobType) -> None:
        with self._lock:
            existing = self._types.get(job_type.name)
            if existing is not None and existing.dotted_path != job_type.dotted_path:
                raise JobTypeAlreadyRegistered(
                    f"job type {job_type.name!r} is registered twice: by "
                    f"{existing.dotted_path} and by {job_type.dotted_path}"
                )
            self._types[job_type.name] = job_type

    def unregister(self, name: str) -> None:
        with self._lock:
            self._types.pop(name, None)

    def get(self, name: str) -> JobType | None:
        return self._types.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def names(self) -> list[str]:
        return sorted(self._types)

    def all(self) -> list[JobType]:
        return [self._types[n] for n in self.names()]


registry = Registry()
