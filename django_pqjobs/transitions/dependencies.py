"""ready → waiting | cancelled: a job enqueued with ``depends_on`` waits for its
prerequisites (or is cancelled at once when one already failed and its policy says so). The
way out of ``waiting`` is the database's, at the commit that finishes the last prerequisite
(sql/schema/composition.sql)."""

from __future__ import annotations

from typing import Any

from ..sql import queries

QUERIES = queries("dependencies")


def make_wait(
    cursor: Any,
    job_id: int,
    status: str,
    waiting_for: int,
    policy: str,
    error_type: str = "",
    error: str = "",
) -> None:
    """The just-inserted (still ready, uncommitted) job becomes ``status``: ``waiting`` for
    ``waiting_for`` prerequisites, ``ready`` (none left), or ``cancelled`` (one failed).
    Takes the enqueuer's cursor: it commits or rolls back with the job."""
    cursor.execute(
        QUERIES["make_wait"], [status, waiting_for, policy, status, error_type, error, job_id]
    )
