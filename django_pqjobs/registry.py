"""Job types: the ``@job`` decorator, their per-type options, and the registry."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from .durations import Duration, to_seconds
from .errors import InvalidJobOption, JobTypeAlreadyRegistered
from .policies import BackoffPolicy, make_backoff
from .schedules.timing import ScheduleError, ScheduleSpec, build_spec

if TYPE_CHECKING:
    from .context import JobContext

Handler = Callable[["JobContext"], Any]
F = TypeVar("F", bound=Handler)

DEDUPE_STRATEGIES = ("skip", "replace", "error")
NAME_MAX_LENGTH = 200


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
    dedupe: str | None = None
    atomic: bool = False
    isolation: str | None = None
    memory_limit: int | None = None
    schedule: ScheduleSpec | None = None

    @cached_property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.handler)

    @property
    def dotted_path(self) -> str:
        return f"{self.handler.__module__}.{self.handler.__qualname__}"


def validate_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidJobOption(f"{what} must be a non-empty string, got {value!r}")
    if len(value) > NAME_MAX_LENGTH:
        raise InvalidJobOption(f"{what} is longer than {NAME_MAX_LENGTH} characters: {value!r}")
    return value


def validate_priority(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
        raise InvalidJobOption(f"{what} must be a whole number (32-bit), got {value!r}")
    return value


def validate_max_attempts(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**31:
        raise InvalidJobOption(f"{what} must be a whole number of at least 1, got {value!r}")
    return value


def validate_timeout(value: object, what: str) -> float:
    try:
        return to_seconds(value, what, allow_zero=False)
    except ValueError as exc:
        raise InvalidJobOption(str(exc)) from None


def validate_dedupe(value: object, what: str) -> str:
    if value not in DEDUPE_STRATEGIES:
        raise InvalidJobOption(f"{what} must be one of {DEDUPE_STRATEGIES}, got {value!r}")
    return str(value)


ISOLATION_MODES = ("thread", "process")
_MEMORY_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}


def validate_isolation(value: object, what: str) -> str:
    if value not in ISOLATION_MODES:
        raise InvalidJobOption(f"{what} must be one of {ISOLATION_MODES}, got {value!r}")
    return str(value)


def parse_memory(value: object, what: str) -> int:
    """Bytes from an int or a string such as ``"512M"``, ``"2G"``, ``"65536K"``."""
    given = value
    if isinstance(value, str):
        text = value.strip().upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in _MEMORY_UNITS else ""
        number = text[: len(text) - len(unit)]
        if number.isdigit():
            value = int(number) * _MEMORY_UNITS[unit]
    if isinstance(value, bool) or not isinstance(value, int) or value < 16 * 1024**2:
        raise InvalidJobOption(
            f"{what} must be a number of bytes of at least 16M, or a string like '512M', "
            f"got {given!r}"
        )
    return value


class Registry:
    """Maps job type names to :class:`JobType`. Thread-safe for registration."""

    def __init__(self) -> None:
        self._types: dict[str, JobType] = {}
        self._lock = threading.Lock()

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


def job(
    name: str | None = None,
    *,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    timeout: Duration | None = None,
    backoff: Any = None,
    dedupe: str | None = None,
    atomic: bool = False,
    isolation: str | None = None,
    memory_limit: int | str | None = None,
    cron: str | None = None,
    interval: Duration | None = None,
    timezone: str = "UTC",
    schedule_payload: Any = None,
    overlap: str = "skip",
    misfire: str = "run_once",
) -> Callable[[F], F]:
    """Register the decorated function as the handler of job type ``name``.

    The handler takes a :class:`~django_pqjobs.JobContext` and may be ``def`` or
    ``async def``; what it returns (any JSON value) is stored as the job's result.

    Options set here are the defaults for jobs of this type; ``enqueue_job`` arguments
    override them. ``name`` defaults to the function's dotted path.
    ``isolation="process"`` runs each job in a child process that is killed on timeout or
    cancel; ``memory_limit`` (bytes, or a string like ``"512M"``) caps that process's address
    space. ``atomic=True`` runs the
    handler and the job's completion in one database transaction.

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
        validate_name(name, "@job name")
    options: dict[str, Any] = {"atomic": bool(atomic)}
    where = f"@job({name!r})" if name else "@job()"
    if queue is not None:
        options["queue"] = validate_name(queue, f"{where} queue")
    if priority is not None:
        options["priority"] = validate_priority(priority, f"{where} priority")
    if max_attempts is not None:
        options["max_attempts"] = validate_max_attempts(max_attempts, f"{where} max_attempts")
    if timeout is not None:
        options["timeout"] = validate_timeout(timeout, f"{where} timeout")
    if backoff is not None:
        try:
            options["backoff"] = make_backoff(backoff, f"{where} backoff")
        except ValueError as exc:
            raise InvalidJobOption(str(exc)) from None
    if dedupe is not None:
        options["dedupe"] = validate_dedupe(dedupe, f"{where} dedupe")
    if isolation is not None:
        options["isolation"] = validate_isolation(isolation, f"{where} isolation")
    if memory_limit is not None:
        options["memory_limit"] = parse_memory(memory_limit, f"{where} memory_limit")
        if options.get("isolation") != "process":
            raise InvalidJobOption(f"{where}: memory_limit needs isolation='process'")
    if atomic and options.get("isolation") == "process":
        raise InvalidJobOption(
            f"{where}: atomic=True and isolation='process' cannot be combined (the job's "
            "transaction lives in the worker, the handler in a child process)"
        )

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
        type_name = name or f"{func.__module__}.{func.__qualname__}"
        if scheduled:
            options["schedule"] = _schedule_spec(type_name, schedule_options, where)
        registry.register(JobType(name=type_name, handler=func, **options))
        func.job_type = type_name  # type: ignore[attr-defined]
        return func

    return decorator


def _schedule_spec(name: str, options: dict[str, Any], where: str) -> ScheduleSpec:
    try:
        return build_spec(name, name, where=where, **options)
    except ScheduleError as exc:
        raise InvalidJobOption(str(exc)) from None
