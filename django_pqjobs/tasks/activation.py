"""Turning the backend's worker side on in a process: the registry resolver, which finds
tasks whose module the worker has not imported. ``django_pqjobs``'s ``AppConfig.ready()``
calls :func:`activate` (it imports neither framework); it does nothing unless ``TASKS``
names this backend. (The signal bridge is connected when the first task is registered.)"""

from __future__ import annotations

import threading

from django.apps import apps
from django.conf import settings

_lock = threading.Lock()
_active = False


def activate() -> None:
    """Install the resolver once, if ``TASKS`` uses this backend."""
    global _active
    if _active or not _configured():
        return
    with _lock:
        if _active:
            return
        from ..registry import registry
        from . import resolver

        registry.add_resolver(resolver.resolve)
        _active = True


def backends() -> list[str]:
    """The ``TASKS`` aliases whose backend is this one: the tasks a worker of this process
    runs (each imported from its app when its first job arrives)."""
    from .loader import uses_this_backend

    if not apps.is_installed("django_pqjobs"):
        return []  # the backend's check() reports it; there are no job tables to serve
    tasks = getattr(settings, "TASKS", None)
    return [alias for alias in tasks if uses_this_backend(alias)] if isinstance(tasks, dict) else []


def _configured() -> bool:
    return bool(backends())
