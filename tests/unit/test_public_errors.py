"""Every error ``errors.py`` defines is importable from the package's top level and named in
the API reference's table of exceptions and in the Python API's list of members."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import django_pqjobs
from django_pqjobs import errors

ROOT = Path(__file__).resolve().parents[2]
ERRORS = sorted(
    name
    for name, value in vars(errors).items()
    if inspect.isclass(value)
    and issubclass(value, BaseException)
    and value.__module__ == errors.__name__
    and not name.startswith("_")
)


def test_errors_are_found() -> None:
    assert {"PQJobsError", "InvalidJobOption", "UnknownJobOption"} <= set(ERRORS)


@pytest.mark.parametrize("name", ERRORS)
def test_every_error_is_exported_at_the_top_level(name: str) -> None:
    assert name in django_pqjobs.__all__
    assert getattr(django_pqjobs, name) is getattr(errors, name)


@pytest.mark.parametrize("name", ERRORS)
def test_every_error_is_documented(name: str) -> None:
    api = (ROOT / "docs" / "reference" / "api.md").read_text(encoding="utf-8")
    members = (ROOT / "docs" / "reference" / "python-api.md").read_text(encoding="utf-8")
    assert f"| `{name}` |" in api or f"| `{name}(" in api
    assert f"- {name}\n" in members
