"""Fixtures of the integration tests."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from types import ModuleType

import psycopg
import pytest
from django.db import connection

from .tasks_apps import tasks_module


@pytest.fixture(params=["django.tasks", "django_tasks"])
def tasks(request: pytest.FixtureRequest) -> ModuleType:
    """The test app of each Tasks framework in turn (skipped where it is not installed)."""
    return tasks_module(request.param)


@pytest.fixture
def empty_database() -> Iterator[str]:
    """A database on the test server that ``migrate`` never ran on."""
    name = f"pqjobs_unmigrated_{uuid.uuid4().hex[:8]}"
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params["dbname"] = "postgres"
    with psycopg.connect(**params, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
        try:
            yield name
        finally:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
