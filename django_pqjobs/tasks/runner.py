"""A task as a job type: the ``JobType`` each task becomes and the handler that runs it.

Every task of this backend is registered as a job type named after its module path when the
task is created (at import of its module), so the worker gives tasks what it gives any job:
timeouts, process isolation, retries with backoff, dedupe, cancel, progress, the admin.

The handler sends the framework's ``task_started`` just before it calls the task, in the
process that runs it (the worker, or the job's own process under process isolation). It
rebuilds a typed parameter's stored argument as its type first (see :mod:`.typed`); one
that no longer fits fails the job for good.
"""

from __future__ import annotations

import functools
import inspect
import logging
import sys
from typing import TYPE_CHECKING, Any

from asgiref.sync import sync_to_async

from ..errors import InvalidJobOption, PermanentError
from ..registry import JobType, registry
from . import payload, results
from .arguments import normalize_return_value
from .binding import RETURN_VALUE, STARTED_RESULT, BoundTask, bound_task
from .bridge import finished
from .options import CALL_KEYS, TaskOptions, options_of
from .sending import observed, send

if TYPE_CHECKING:
    from ..context import JobContext
    from .families import Family


# Modules a worker cannot import a task from: in a worker, __main__ is manage.py; a spawned
# child's copy of a script is __mp_main__; a function typed into `manage.py shell` has no
# module at all (None).
_NOT_IMPORTABLE = frozenset({"__main__", "__mp_main__", "None"})


def _not_importable(task: Any, why: str) -> str:
    return (
        f"task {task.module_path!r} {why}: workers import a task by its module path and could "
        "not find it there; define it in a module of an installed app (e.g. myapp/tasks.py)"
    )


def check_importable(task: Any) -> None:
    """Raise InvalidJobOption unless the task's module path leads back to the task, as it
    will in a worker. Called at enqueue (the module is loaded by then): code run by
    ``manage.py shell -c`` names a module that does not hold it."""
    found: Any = sys.modules.get(task.func.__module__)
    for part in task.func.__qualname__.split("."):
        found = getattr(found, part, None)
    if (
        found is not task
        and found is not task.func
        and getattr(found, "func", None) is not task.func
    ):
        raise InvalidJobOption(_not_importable(task, "is not found at its module path"))


def ensure_registered(task: Any, family: Family, defaults: TaskOptions) -> JobType:
    """The job type of ``task``, registered on first use.

    Raises InvalidJobOption for bad options or a task no worker could import, and
    JobTypeAlreadyRegistered when a native job type already owns the task's module path.
    """
    if task.module_path.partition(".")[0] in _NOT_IMPORTABLE:
        raise InvalidJobOption(_not_importable(task, "is defined in a script or a shell"))
    existing = registry.get(task.module_path)
    bound = bound_task(existing)
    if existing is not None and bound is not None and bound.task is task:
        return existing
    options = options_of(task).over(defaults)
    options.check_combination(f"task {task.module_path!r}")
    if existing and bound and bound.task.func is task.func and bound.options == options:
        return existing  # a .using() copy: the same job type
    bound = BoundTask(task, family, options)
    job_type = JobType(
        name=task.module_path,
        handler=_handler(bound),
        # the task's options its type keeps (its keys are read at each call)
        **{name: value for name, value in options.given().items() if name not in CALL_KEYS},
        # the framework's task_finished, sent where the worker sends job_finished
        on_finished=functools.partial(finished, bound),
    )
    registry.register(job_type)
    return job_type


def _handler(bound: BoundTask) -> Any:
    task = bound.task
    func = task.func
    family = bound.family
    takes_context = bool(task.takes_context)
    started = family.task_started
    # The per-job path of a no-op task costs about what running a no-op job does: it is
    # written with few calls (the payload check and the return value's inline).

    if inspect.iscoroutinefunction(func):

        async def run_async(ctx: JobContext) -> Any:
            args, kwargs = _arguments(bound, ctx)
            if bound.typed is not None:
                args, kwargs = bound.typed.load(bound.path, ctx.job.id, args, kwargs)
            if takes_context or observed(family, started, logging.INFO):
                # Its queries and the signal's receivers are sync code.
                context = await sync_to_async(_start, thread_sensitive=True)(bound, ctx)
                if takes_context:
                    args = [context, *args]
            value = await func(*args, **kwargs)
            if value is not None:
                value = normalize_return_value(bound.path, value)
            setattr(ctx.job, RETURN_VALUE, value)
            return value

        handler: Any = run_async
    else:

        def run(ctx: JobContext) -> Any:
            stored = ctx.job.payload
            args = stored.get("args") if type(stored) is dict else None
            kwargs = stored.get("kwargs") if type(stored) is dict else None
            if not (
                type(args) is list
                and type(kwargs) is dict
                and type(stored.get(payload.BACKEND_KEY)) is str
            ):
                args, kwargs = _arguments(bound, ctx)
            if bound.typed is not None:
                args, kwargs = bound.typed.load(bound.path, ctx.job.id, args, kwargs)
            if takes_context or observed(family, started, logging.INFO):
                context = _start(bound, ctx)
                if takes_context:
                    args = [context, *args]
            value = func(*args, **kwargs)
            if value is not None:
                value = normalize_return_value(bound.path, value)
            setattr(ctx.job, RETURN_VALUE, value)
            return value

        handler = run
    # The job type's dotted path is the task's, so the task registered again (a .using()
    # copy, a second backend alias) is the same job type, not a conflicting one.
    handler.__module__ = func.__module__
    handler.__qualname__ = func.__qualname__
    handler.pqjobs_task = bound
    return handler


def _arguments(bound: BoundTask, ctx: JobContext) -> tuple[list[Any], dict[str, Any]]:
    try:
        _alias, args, kwargs = payload.unpack(ctx.job.payload)
    except ValueError as exc:
        raise PermanentError(f"job {ctx.job.id} of task {bound.path!r}: {exc}") from None
    return args, kwargs


def _start(bound: BoundTask, ctx: JobContext) -> Any:
    """The attempt's RUNNING TaskResult: sent with ``task_started`` (where it has receivers)
    and kept on the job for ``task_finished``. Returns the TaskContext a
    ``takes_context`` task gets (its TaskResult and attempt number), else None."""
    family = bound.family
    job = ctx.job
    history = results.load_history(ctx.using, job.id) if results.needs_history(job) else None
    task_result = results.build(family, bound.task, job, history, status="running")
    setattr(job, STARTED_RESULT, task_result)
    if observed(family, family.task_started, logging.INFO):
        send(family, family.task_started, task_result, bound.path)
    return family.task_context(task_result=task_result) if bound.task.takes_context else None
