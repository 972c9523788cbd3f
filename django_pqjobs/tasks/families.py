"""The two implementations of Django's Tasks framework API, side by side.

``django.tasks`` is built into Django 6.0+; ``django_tasks`` is the backport on PyPI
(``django-tasks``), which libraries still import on Django 6. Both read the same ``TASKS``
setting, each through its own handler, with their own ``Task``, ``TaskResult``, statuses,
exceptions and signals. A :class:`Family` gathers one implementation's classes so that the
backend has one code path for both: a backend instance serves the family whose handler
created it, a task runs with the family it was declared with.
"""

from __future__ import annotations

import dataclasses
import logging
import sys
from dataclasses import dataclass
from functools import cache
from types import FrameType
from typing import Any

from .options import OPTION_NAMES

BUILTIN = "django.tasks"
BACKPORT = "django_tasks"


@dataclass(frozen=True, eq=False)
class Family:
    """One implementation of the Tasks framework (see the module docstring)."""

    name: str
    handler: Any  # its task_backends
    base_backend: Any  # its BaseTaskBackend
    task: type
    task_class: type  # ``task`` with django-pqjobs's options as extra fields
    task_result: type
    task_context: type
    task_error: type
    status: Any  # its TaskResultStatus
    invalid_task: type[Exception]
    invalid_backend: type[Exception]
    result_does_not_exist: type[Exception]
    task_enqueued: Any
    task_started: Any
    task_finished: Any
    # The framework's own receivers of its signals, which only log, and their logger.
    log_receivers: frozenset[Any]
    logger: logging.Logger

    def __repr__(self) -> str:
        return f"<Tasks framework {self.name}>"


def _task_class(base: type) -> type:
    """``base`` (a frozen dataclass) plus one field per django-pqjobs option.

    ``@task(max_attempts=3)`` reaches it as a keyword argument on Django 6.1+ and with the
    backport, which pass the decorator's extra keywords to the backend's ``task_class``.
    """
    cls = dataclasses.make_dataclass(
        "PQJobsTask",
        [(name, Any, dataclasses.field(default=None)) for name in OPTION_NAMES],
        bases=(base,),
        frozen=True,
        slots=True,
        kw_only=True,
        namespace={"__module__": __name__},
    )
    cls.__doc__ = f"A {base.__module__} Task with django-pqjobs's options as fields."
    return cls


def _builtin() -> Family | None:
    try:
        import django.tasks as framework
    except ImportError:  # Django < 6.0
        return None
    from django.tasks import base, exceptions, signals
    from django.tasks.backends.base import BaseTaskBackend

    return Family(
        name=BUILTIN,
        handler=framework.task_backends,
        base_backend=BaseTaskBackend,
        task=base.Task,
        task_class=_task_class(base.Task),
        task_result=base.TaskResult,
        task_context=base.TaskContext,
        task_error=base.TaskError,
        status=base.TaskResultStatus,
        invalid_task=exceptions.InvalidTask,
        invalid_backend=exceptions.InvalidTaskBackend,
        result_does_not_exist=exceptions.TaskResultDoesNotExist,
        task_enqueued=signals.task_enqueued,
        task_started=signals.task_started,
        task_finished=signals.task_finished,
        log_receivers=_log_receivers(signals),
        logger=signals.logger,
    )


def _backport() -> Family | None:
    try:
        import django_tasks as framework
    except ImportError:  # pip install django-pqjobs[tasks]
        return None
    from django_tasks import base, exceptions, signals
    from django_tasks.backends.base import BaseTaskBackend

    return Family(
        name=BACKPORT,
        handler=framework.task_backends,
        base_backend=BaseTaskBackend,
        task=base.Task,
        task_class=_task_class(base.Task),
        task_result=base.TaskResult,
        task_context=base.TaskContext,
        task_error=base.TaskError,
        status=base.TaskResultStatus,
        invalid_task=exceptions.InvalidTaskError,
        invalid_backend=exceptions.InvalidTaskBackendError,
        result_does_not_exist=exceptions.TaskResultDoesNotExist,
        task_enqueued=signals.task_enqueued,
        task_started=signals.task_started,
        task_finished=signals.task_finished,
        log_receivers=_log_receivers(signals),
        logger=signals.logger,
    )


def _log_receivers(signals: Any) -> frozenset[Any]:
    names = ("log_task_enqueued", "log_task_started", "log_task_finished")
    return frozenset(getattr(signals, name) for name in names if hasattr(signals, name))


@cache
def installed() -> tuple[Family, ...]:
    """The families that can be imported here, the built-in one first."""
    return tuple(family for family in (_builtin(), _backport()) if family is not None)


def of_task(task: object) -> Family | None:
    """The family ``task`` belongs to, or None if it is not a Task at all.

    Looks at the object's type only: nothing on the object is called.
    """
    kind = type(task)
    for family in installed():
        if issubclass(kind, family.task):
            return family
    return None


# How far up the stack the framework's handler may be from the backend's __init__: its
# create_connection() calls the backend class directly; a subclass's __init__ adds a frame.
_MAX_FRAMES = 8


def creating_backend() -> Family:
    """The family whose ``task_backends`` handler is creating a backend right now.

    Both handlers build a backend as ``BACKEND(alias=..., params=...)`` with nothing that says
    which of them asks, so the backend looks for the handler among its callers' frames. A
    backend created directly (not through a handler) serves the built-in family if Django
    has one, else the backport.
    """
    families = installed()
    if not families:
        raise ImportError(
            "django_pqjobs.tasks.PQJobsBackend needs Django's Tasks framework: Django 6.0 or "
            "newer, or the backport (pip install 'django-pqjobs[tasks]')"
        )
    frame: FrameType | None = sys._getframe(1)
    for _ in range(_MAX_FRAMES):
        if frame is None:
            break
        owner = frame.f_locals.get("self")
        for family in families:
            if isinstance(owner, type(family.handler)):
                return family
        frame = frame.f_back
    return families[0]
