"""pytest fixtures for testing jobs (registered automatically when django-pqjobs is installed).

- ``pqjobs``: the helpers of :mod:`django_pqjobs.testing` (``pqjobs.drain()``,
  ``pqjobs.assert_enqueued(...)``, ``pqjobs.enqueued(...)``, ``pqjobs.trigger_schedule(...)``).
- ``pqjobs_eager``: eager mode for the whole test; yields the list of jobs run so far.

Like any database test under pytest-django, the test needs ``@pytest.mark.django_db`` (or
the ``db`` / ``transactional_db`` fixture). The plugin reads no setting and touches no
database until a fixture is used; ``-p no:django_pqjobs`` turns it off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


class PQJobsHelpers:
    """What the ``pqjobs`` fixture gives a test: the functions of
    :mod:`django_pqjobs.testing` under short names."""

    def __init__(self) -> None:
        from . import testing

        self.drain = testing.drain
        self.enqueued = testing.enqueued_jobs
        self.assert_enqueued = testing.assert_enqueued
        self.assert_not_enqueued = testing.assert_not_enqueued
        self.eager = testing.eager
        self.trigger_schedule = testing.trigger_schedule


@pytest.fixture
def pqjobs() -> PQJobsHelpers:
    """Run due jobs in the test (``pqjobs.drain()``) and assert what was enqueued."""
    return PQJobsHelpers()


@pytest.fixture
def pqjobs_eager() -> Iterator[list[Any]]:
    """Every job enqueued during the test runs as soon as its enqueue is committed."""
    from .testing import eager

    with eager() as runs:
        yield runs
