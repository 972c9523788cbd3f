"""django-pqjobs as a backend of Django's Tasks framework.

    TASKS = {"default": {"BACKEND": "django_pqjobs.tasks.PQJobsBackend"}}

Works with ``django.tasks`` (Django 6.0+) and the ``django_tasks`` backport (Django 5.2,
``pip install django-pqjobs[tasks]``), both at once. Importing this package imports neither:
:class:`PQJobsBackend` is loaded when it is first used. See docs/guides/tasks-framework.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .errors import TaskArgumentsError, TaskNotLoadable, TaskReturnValueError
from .options import task_options

if TYPE_CHECKING:
    from .backend import PQJobsBackend

__all__ = [
    "PQJobsBackend",
    "TaskArgumentsError",
    "TaskNotLoadable",
    "TaskReturnValueError",
    "task_options",
]


def __getattr__(name: str) -> Any:
    if name == "PQJobsBackend":
        from .backend import PQJobsBackend

        return PQJobsBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
