"""Options django-pqjobs adds to a task: attempts, backoff, timeout, isolation, memory limit,
dedupe. They come, field by field, from ``@task(...)`` keyword arguments (Django 6.1+ and the
backport forward them to the backend's task class), else from ``@task_options(...)`` under
``@task`` (any version), else from the backend's ``OPTIONS``, else from ``PQJOBS``.

Every value is validated when it is declared, so a bad one fails the import of its module.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar, Unpack

from .. import specification
from ..errors import InvalidJobOption
from ..options import Dedupe, Isolation
from ..policies import BackoffPolicy
from ..specification import TaskKey, TaskOptionValues

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["TaskKey", "TaskOptionValues", "TaskOptions", "task_options"]

# The keys of a backend's OPTIONS and the task option each sets a default for. There is no
# backend-wide dedupe or fair key: a key only means something for one task (a queue's fair
# key is PQJOBS["FAIR_QUEUES"]).
# The task options read at each call, from its arguments; the others are its job type's.
CALL_KEYS = ("dedupe_key", "fair_key")
BACKEND_OPTIONS = {
    name.upper(): name for name in specification.names_at("task") if name not in CALL_KEYS
}

_DECLARED = "pqjobs_task_options"


@dataclass(frozen=True)
class TaskOptions:
    """Validated options (:class:`~django_pqjobs.specification.TaskOptionValues`, read);
    ``None`` means "not set here"."""

    max_attempts: int | None = None
    timeout: float | None = None
    backoff: BackoffPolicy | None = None
    isolation: Isolation | None = None
    memory_limit: int | None = None
    dedupe_key: TaskKey | None = None
    dedupe: Dedupe | None = None
    unique_for: float | None = None
    unique_states: int | None = None
    unique_by: str | tuple[str, ...] | None = None
    debounce: float | None = None
    debounce_max: float | None = None
    expires_in: float | None = None
    fair_key: TaskKey | None = None

    def given(self) -> dict[str, Any]:
        """The options set here."""
        found = {f.name: getattr(self, f.name) for f in fields(self)}
        return {name: value for name, value in found.items() if value is not None}

    def over(self, defaults: TaskOptions) -> TaskOptions:
        """These options, with ``defaults`` filling the ones not set."""
        return replace(defaults, **self.given())

    def check_combination(self, where: str) -> None:
        specification.check_rules(self.given(), where)


OPTION_NAMES = tuple(f.name for f in fields(TaskOptions))


def parse_options(
    raw: Mapping[str, Any], where: str, label: Callable[[str], str] | None = None
) -> TaskOptions:
    """Validate option values given by their task-level names (``max_attempts=...``).

    Errors name an option as ``label(name)`` (default: ``"<where> <name>"``).
    """
    return TaskOptions(**specification.declare("task", where, raw, label))


def parse_backend_options(raw: object, alias: str) -> TaskOptions:
    """Validate a backend's ``OPTIONS`` (``{"MAX_ATTEMPTS": 3, ...}``)."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(raw, Mapping):
        raise InvalidJobOption(f"{where} must be a dict, got {raw!r}")
    unknown = sorted(set(raw) - set(BACKEND_OPTIONS))
    if unknown:
        raise InvalidJobOption(
            f"{where}: unknown key(s) {', '.join(map(repr, unknown))}; "
            f"known: {', '.join(BACKEND_OPTIONS)}"
        )
    keys = {name: key for key, name in BACKEND_OPTIONS.items()}
    options = parse_options(
        {BACKEND_OPTIONS[key]: value for key, value in raw.items()},
        where,
        label=lambda name: f"{where}[{keys[name]!r}]",
    )
    options.check_combination(where)
    return options


def task_options(**options: Unpack[TaskOptionValues]) -> Callable[[F], F]:
    """Declare django-pqjobs options for a task, on any Django version.

    Put it *under* ``@task``::

        @task(queue_name="emails")
        @task_options(max_attempts=3, timeout=60, isolation="process")
        def send_receipt(order_id: int) -> None: ...

    Options: ``max_attempts``, ``timeout`` (seconds or timedelta), ``backoff`` (as
    ``@job(backoff=...)``), ``isolation`` (``"thread"`` / ``"process"``), ``memory_limit``
    (``"512M"``; needs process isolation), ``dedupe_key`` (a string, or a function called with
    the task's arguments that returns the key or None), ``dedupe`` (``"skip"``,
    ``"replace"``, ``"error"``) and the unique-job options ``unique_for``,
    ``unique_states``, ``unique_by``, ``debounce`` and ``debounce_max`` (as ``@job``'s: a
    task given no key gets one from its arguments), and ``expires_in`` (a deadline that
    long after the task is due: not started by then, it ends expired, its result FAILED),
    and ``fair_key`` (a key, or a function called with the task's arguments that returns
    the key workers take turns by, or None: see fair claiming).
    On Django 6.1+ and with the backport the same keywords can be given to ``@task(...)``
    itself, and win over these. Bad values raise :class:`~django_pqjobs.InvalidJobOption` at once.
    """
    declared = parse_options(options, "@task_options(...)")

    def decorator(func: F) -> F:
        if not callable(func) or hasattr(func, "func"):
            raise InvalidJobOption(
                "@task_options(...) must decorate the task's function: put it under @task"
            )
        setattr(func, _DECLARED, declared)
        return func

    return decorator


def options_of(task: Any) -> TaskOptions:
    """The options a task declared, ``@task(...)`` keywords over ``@task_options``."""
    declared = getattr(task.func, _DECLARED, None) or TaskOptions()
    given = {name: getattr(task, name, None) for name in OPTION_NAMES}
    if not any(value is not None for value in given.values()):
        return declared
    return parse_options(given, f"@task {task.module_path}").over(declared)
