"""Fixtures of the integration tests."""

from __future__ import annotations

from types import ModuleType

import pytest

from .tasks_apps import tasks_module


@pytest.fixture(params=["django.tasks", "django_tasks"])
def tasks(request: pytest.FixtureRequest) -> ModuleType:
    """The test app of each Tasks framework in turn (skipped where it is not installed)."""
    return tasks_module(request.param)
