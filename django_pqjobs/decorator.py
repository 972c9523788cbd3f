"""``@job``: declaring a job type. Its options are read (``specification.py``), its
schedule built (``recurrence.py``), its typed arguments found (``arguments.py``), and the
:class:`~django_pqjobs.registry.JobType` registered. A handler with typed arguments also
enqueues its own jobs (:class:`TypedJob`), typed for a type checker."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, Unpack, cast, overload

from . import arguments, specification
from .durations import Duration
from .enqueue import enqueue_job, enqueue_on_commit
from .errors import InvalidJobOption
from .options import job_type_name
from .recurrence import ScheduleError, ScheduleSpec, build_spec
from .registry import Handler, JobType, registry
from .specification import EnqueueOptions, TypeOptions

if TYPE_CHECKING:
    from .context import JobContext

F = TypeVar("F", bound=Handler)
A = TypeVar("A")
R = TypeVar("R")
A_contra = TypeVar("A_contra", contravariant=True)
R_co = TypeVar("R_co", covariant=True)


class TypedJob(Protocol[A_contra, R_co]):
    """What ``@job`` makes of a handler with typed arguments (``def h(ctx, args: T)``):
    the function itself, which also enqueues its jobs with arguments of its type, so a type
    checker sees a wrong argument where the job is enqueued."""

    job_type: str

    def __call__(self, ctx: JobContext, args: A_contra, /) -> R_co: ...

    def enqueue(
        self, args: A_contra, /, *, using: str | None = None, **options: Unpack[EnqueueOptions]
    ) -> int:
        """``enqueue_job(job_type, args, ...)``: the id of the job."""
        ...

    def enqueue_on_commit(
        self, args: A_contra, /, *, using: str | None = None, **options: Unpack[EnqueueOptions]
    ) -> None:
        """``enqueue_on_commit(job_type, args, ...)``."""
        ...


class JobDecorator(Protocol):
    """The decorator ``@job(...)`` returns: a handler with typed arguments becomes a
    :class:`TypedJob`; any other is returned as it is (with its ``job_type``)."""

    @overload
    def __call__(self, func: Callable[[JobContext, A], R]) -> TypedJob[A, R]: ...

    @overload
    def __call__(self, func: F) -> F: ...


def job(
    name: str | None = None,
    *,
    cron: str | None = None,
    interval: Duration | None = None,
    timezone: str = "UTC",
    schedule_payload: Any = None,
    overlap: str = "skip",
    misfire: str = "run_once",
    **options: Unpack[TypeOptions],
) -> JobDecorator:
    """Register the decorated function as the handler of job type ``name``.

    The handler takes a :class:`~django_pqjobs.JobContext` and may be ``def`` or
    ``async def``; what it returns (any JSON value) is stored as the job's result.

    Options set here (:class:`~django_pqjobs.specification.TypeOptions`) are the defaults
    for jobs of this type; ``enqueue_job`` arguments override them. ``name`` defaults to the
    function's dotted path.
    ``isolation="process"`` runs each job in a child process that is killed on timeout or
    cancel; ``memory_limit`` (bytes, or a string like ``"512M"``) caps that process's address
    space. ``atomic=True`` runs the
    handler and the job's completion in one database transaction.

    Flow control (see docs/guides/flow-control.md): ``concurrency=N`` lets at most N jobs
    of one key run at once across all workers; the key comes from ``concurrency_key`` (a
    format string over the payload's fields such as ``"account:{account_id}"``, or a
    callable ``fn(payload)``), else it is the job type; a template writes each value in one
    canonical, escaped form (``1``, ``1.0`` and ``"01"`` give one key; ``"a:b"`` is
    ``a%3Ab``) and refuses bools, None and control characters. ``max_waiting`` also caps
    the jobs of a key waiting to run: beyond it ``enqueue_job`` raises ``QueueFull``
    (``when_waiting_full="refuse"``) or returns the newest waiting job's id (``"skip"``).
    ``rate="100/m"`` starts at most 100 jobs per minute (fixed windows), per ``rate_key``
    if given (same forms as ``concurrency_key``), else for the whole job type.

    Unique jobs (see docs/guides/unique-jobs.md): ``unique_for`` (``"1h"``, a timedelta or
    seconds) holds a job's dedupe key for the window of that length it was enqueued in,
    whatever its status; ``unique_states`` (``["done", "failed"]``) also holds it in those
    finished statuses; a job given no ``dedupe_key`` gets one from its payload, all of it
    or the fields ``unique_by`` names. ``dedupe`` answers a duplicate. ``debounce="30s"``
    keeps one pending job per key (the job type, or ``unique_by``'s fields): each duplicate
    gives it its payload and pushes it back 30 s, never past ``debounce_max`` after it was
    first enqueued; one arriving while it runs is enqueued to run after it.

    Timing and order: ``expires_in="10m"`` gives each job a deadline that long after it is
    due; one not started by then ends ``expired`` (no attempt starts after it).
    ``sequence="account:{account_id}"`` (same forms as ``concurrency_key``) runs the jobs of
    one key one at a time, in enqueue order; when one fails for good the rest wait until an
    operator retries or skips it (``sequence_on_failure="halt"``, the default of
    ``PQJOBS["SEQUENCE_ON_FAILURE"]``) or go on (``"continue"``).

    Fair claiming: ``fair_key="tenant:{tenant_id}"`` (same forms as ``concurrency_key``):
    among due jobs of equal priority, workers take keys in turns (weighted by
    :func:`~django_pqjobs.set_fair_weight`), so a key with 100,000 jobs waiting does not hold
    up a key with 10. See docs/guides/fair-claiming.md.

    ``encrypted=True`` keeps the payload and the result encrypted at rest with the keys of
    ``PQJOBS["ENCRYPTION_KEYS"]``; ``encrypted=["card_number"]`` only those top-level fields
    (see docs/guides/writing-jobs.md#encrypted-jobs). ``version=2`` with
    ``upgrade=fn(payload, version)`` declares the payload's shape: jobs written for an
    older version (an earlier deploy's) are upgraded before the handler runs (see
    docs/guides/writing-jobs.md#versioned-payloads).

    ``cron`` (``"0 3 * * *"``; 6 fields = seconds last) or ``interval`` (timedelta or
    seconds) also declares a schedule named after the job type, synced to the Schedule
    table when a worker starts: ``timezone`` (IANA name, default UTC) for the cron fields,
    ``schedule_payload`` for its jobs, ``overlap`` (``"skip"``: no new run while the last is
    ready/running, or ``"allow"``) and ``misfire`` (``"run_once"`` after downtime, or
    ``"skip"``). See docs/guides/recurring-jobs.md.

    Raises :class:`~django_pqjobs.errors.InvalidJobOption` for a bad option and
    :class:`~django_pqjobs.errors.JobTypeAlreadyRegistered` when another function already
    owns ``name``.
    """
    if callable(name):
        raise InvalidJobOption("use @job('name', ...) or @job() - not bare @job")
    if name is not None:
        job_type_name(name, "@job name")
    where = f"@job({name!r})" if name else "@job()"
    chosen = specification.declare("type", where, options)
    specification.check_rules(chosen, where)

    scheduled = cron is not None or interval is not None
    schedule_options = {
        "cron": cron,
        "interval": interval,
        "timezone": timezone,
        "payload": schedule_payload,
        "overlap": overlap,
        "misfire": misfire,
    }
    if scheduled:
        _schedule_spec(name or "job", schedule_options, where)  # fail at declaration
    elif (schedule_payload, timezone, overlap, misfire) != (None, "UTC", "skip", "run_once"):
        raise InvalidJobOption(
            f"{where}: schedule_payload, timezone, overlap and misfire need cron= or interval="
        )

    def decorator(func: F) -> F:
        if not callable(func):
            raise InvalidJobOption(f"{where} must decorate a function, got {func!r}")
        type_name = name or job_type_name(
            f"{func.__module__}.{func.__qualname__}", f"{where} name (the function's path)"
        )
        if scheduled:
            chosen["schedule"] = _schedule_spec(type_name, schedule_options, where)
        typed = arguments.of_handler(func)
        registry.register(JobType(name=type_name, handler=func, arguments=typed, **chosen))
        func.job_type = type_name  # type: ignore[attr-defined]
        if typed is not None:
            _give_enqueue(func, type_name)
        return func

    return cast(JobDecorator, decorator)


def _give_enqueue(func: Any, type_name: str) -> None:
    """The ``enqueue`` and ``enqueue_on_commit`` of a :class:`TypedJob`."""

    def enqueue(args: Any, /, *, using: str | None = None, **options: Any) -> int:
        return enqueue_job(type_name, args, using=using, **options)

    def enqueue_later(args: Any, /, *, using: str | None = None, **options: Any) -> None:
        enqueue_on_commit(type_name, args, using=using, **options)

    func.enqueue = enqueue
    func.enqueue_on_commit = enqueue_later


def _schedule_spec(name: str, options: dict[str, Any], where: str) -> ScheduleSpec:
    try:
        return build_spec(name, name, where=where, **options)
    except ScheduleError as exc:
        raise InvalidJobOption(str(exc)) from None
