"""Which backend is ours, known low in ``tasks/``: the modules below the backend recognise
it in settings and send the framework's signals as it without importing it (the backend
imports them). The backend class registers itself here as its module is imported.
"""

from __future__ import annotations

from typing import Any

from django.utils.module_loading import import_string

# The path settings name it by, and the class's own.
BACKEND_PATH = "django_pqjobs.tasks.PQJobsBackend"
_CLASS_PATH = "django_pqjobs.tasks.backend.PQJobsBackend"

_registered: list[type] = []


def register(backend_class: type) -> type:
    """Called once, as ``PQJobsBackend`` is defined."""
    _registered[:] = [backend_class]
    return backend_class


def backend_class() -> type:
    """``PQJobsBackend``: the ``sender`` of every signal about a task."""
    if not _registered:  # nothing imported the backend yet: load it by its path
        import_string(BACKEND_PATH)
    return _registered[0]


def is_backend(candidate: Any) -> bool:
    """Whether ``candidate`` is ``PQJobsBackend`` or a subclass of it (by name: importing
    a class to compare would import the backend)."""
    return isinstance(candidate, type) and any(
        f"{cls.__module__}.{cls.__qualname__}" == _CLASS_PATH for cls in candidate.__mro__
    )
