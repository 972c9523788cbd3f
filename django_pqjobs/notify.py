"""Waking idle workers: NOTIFY on the channel workers LISTEN on, with the queue as payload.

Notifications are transactional: sent inside a transaction, they are delivered when it
commits and dropped when it rolls back, like the jobs they announce. They are sent only
while some worker listens (``pqjobs_worker.listening``). ``LISTEN_NOTIFY = False`` turns
them off (workers then find new jobs by polling).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import psycopg
from django.db import connections

from .conf import conf
from .sql import queries

CHANNEL = "pqjobs"


def listening_connection(alias: str) -> psycopg.Connection[Any]:
    """A connection of its own to ``alias``, outside Django's pool, in autocommit: what
    LISTEN needs (a worker's listener, ``wait_for()``)."""
    params = connections[alias].get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params, autocommit=True)


def channel() -> str | None:
    """The channel to notify, or None when notifications are off."""
    return CHANNEL if conf.LISTEN_NOTIFY else None


# A NOTIFY costs every notifying transaction a database-wide lock through its commit, and
# is heard by no one while every worker claims on its own (under load): so only while some
# worker says it listens (pqjobs_enqueue() applies the same rule). The function needs no
# grant on pqjobs_worker (sql/schema/enqueue.sql).
ANYONE_LISTENS = "pqjobs_anyone_listens()"
QUERIES = {
    name: text.replace("{anyone_listens}", ANYONE_LISTENS)
    for name, text in queries("notify").items()
}


def notify_queues(cursor: Any, queues: Iterable[str]) -> None:
    """Tell idle workers that jobs of ``queues`` are due."""
    names = sorted(set(queues))
    if names and conf.LISTEN_NOTIFY:
        cursor.execute(
            QUERIES["notify_queues"],
            [CHANNEL, names],
        )


def notify_jobs(cursor: Any, job_ids: Sequence[int]) -> None:
    """Tell idle workers that the jobs ``job_ids`` just became due (retried, run now: on
    the hot shelf)."""
    if job_ids and conf.LISTEN_NOTIFY:
        cursor.execute(
            QUERIES["notify_jobs"],
            [CHANNEL, list(job_ids)],
        )
