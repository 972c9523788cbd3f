"""The test apps written against each Tasks framework, for tests that run with each one."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest
from django.apps import apps

# (app, the framework it imports): installed by tests/settings.py when the framework is.
APPS = {
    "django.tasks": "tests.tasks_builtin",
    "django_tasks": "tests.tasks_backport",
}


def tasks_module(family: str) -> ModuleType:
    """The ``tasks`` module of ``family``'s test app; skips the test if it is not installed."""
    app = APPS[family]
    if not apps.is_installed(app):
        reason = "Django 6.1+" if family == "django.tasks" else "the django-tasks backport"
        pytest.skip(f"{family} tasks need {reason} (not installed here)")
    return importlib.import_module(f"{app}.tasks")


def framework(family: str) -> ModuleType:
    """``django.tasks`` or ``django_tasks``, with its ``exceptions`` submodule loaded."""
    module = importlib.import_module(family)
    importlib.import_module(f"{family}.exceptions")
    return module
