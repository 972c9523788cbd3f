"""Finding the Task a stored job names, without running anything else.

A job's type is a module path such as ``billing.tasks.send_invoice``. It is only imported
when it lies inside an installed app (code the project already runs), and only an object
that is a ``Task`` whose backend is django-pqjobs's is accepted: a path to any other object,
a module that cannot be imported or a name that no longer exists raises
:class:`TaskNotLoadable`, and the object found is never called.
"""

from __future__ import annotations

import importlib
import re
from typing import Any

from django.apps import apps
from django.conf import settings
from django.utils.module_loading import import_string

from . import families, identity
from .errors import TaskNotLoadable
from .identity import BACKEND_PATH

_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\Z", re.ASCII)
# The app's own package holds no tasks: never import its modules for a stored path.
_NEVER = ("django_pqjobs",)


def split_path(name: str) -> tuple[str, str] | None:
    """``(module, attribute)`` when ``name`` is a dotted path inside an installed app."""
    if not _DOTTED.match(name):
        return None
    module, _, attribute = name.rpartition(".")
    for app in apps.get_app_configs():
        if app.name in _NEVER:
            continue
        if module == app.name or module.startswith(app.name + "."):
            return module, attribute
    return None


def load_task(name: str) -> Any:
    """The Task (of any installed family) stored as ``name``, or TaskNotLoadable."""
    where = split_path(name)
    if where is None:
        raise TaskNotLoadable(
            f"{name!r} is not a module path inside an installed app, so it is not loaded as "
            "a task (task modules are only imported from INSTALLED_APPS)"
        )
    module_name, attribute = where
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise TaskNotLoadable(
            f"task {name!r}: its module {module_name!r} could not be imported "
            f"({type(exc).__name__}: {exc})"
        ) from None
    # The module's namespace, not getattr(): a module-level __getattr__ is code.
    found = vars(module).get(attribute, _MISSING)
    if found is _MISSING:
        raise TaskNotLoadable(
            f"task {name!r}: module {module_name!r} has no {attribute!r} (was the task "
            "renamed, moved or removed after the job was enqueued?)"
        )
    family = families.of_task(found)
    if family is None:
        kind = type(found)
        raise TaskNotLoadable(
            f"{name!r} is a {kind.__module__}.{kind.__qualname__}, not a Task: it was not "
            "called (only @task functions run as tasks)"
        )
    if found.module_path != name:
        raise TaskNotLoadable(
            f"{name!r} refers to the task {found.module_path!r}; a task runs under its own "
            "path only"
        )
    if not uses_this_backend(found.backend):
        raise TaskNotLoadable(
            f"{name!r} is a task of backend {found.backend!r}, which is not "
            f"{BACKEND_PATH}: it was not called"
        )
    return found


DEFAULT_QUEUE_NAME = "default"


def queues_of(params: dict[str, Any]) -> set[str]:
    """The queues a ``TASKS`` entry's tasks may use: its ``QUEUES`` (the framework's
    default: ``["default"]``; an empty list allows any)."""
    return {str(name) for name in params.get("QUEUES", [DEFAULT_QUEUE_NAME])}


def configured_queues() -> set[str]:
    """Every queue named by the ``TASKS`` entries of this backend (for the admin's queue
    filter: tasks enqueue there whether or not a job is there yet)."""
    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict):
        return set()
    return {
        name
        for alias, params in tasks.items()
        if isinstance(params, dict) and uses_this_backend(alias)
        for name in queues_of(params)
    }


def uses_this_backend(alias: str) -> bool:
    """Whether ``TASKS[alias]`` is django-pqjobs's backend (or a subclass of it)."""
    params = (getattr(settings, "TASKS", None) or {}).get(alias)
    path = params.get("BACKEND") if isinstance(params, dict) else None
    if not isinstance(path, str):
        return False
    if path == BACKEND_PATH:
        return True
    if path.startswith(("django.tasks.", "django_tasks.")):
        return False
    try:
        backend = import_string(path)
    except ImportError:
        return False
    return identity.is_backend(backend)


_MISSING: Any = object()
