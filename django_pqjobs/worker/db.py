"""Connection hygiene for long-running worker threads."""

from __future__ import annotations

import logging
import select
from collections.abc import Sequence

from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

logger = logging.getLogger("django_pqjobs")

# Errors that mean "the database connection is broken", not "this job is bad".
CONNECTION_ERRORS = (OperationalError, InterfaceError)


def reset_connection(alias: str) -> None:
    """Drop this thread's connection to ``alias`` so the next query reconnects.

    Never raises: closing an already broken connection must not kill a worker loop.
    """
    try:
        connections[alias].close()
    except DatabaseError:
        logger.debug("ignoring an error while closing a broken connection", exc_info=True)
        connections[alias].connection = None


def thread_connections() -> list[BaseDatabaseWrapper]:
    """This thread's connection wrappers, one per database alias (none of them connects).

    A thread that keeps this list can check its connections without asking Django's
    thread-local registry for each alias: that lookup cost a worker more per job than the
    check itself. The wrappers are the ones the thread's queries use, and stay so for its
    life.
    """
    return [connections[alias] for alias in connections]


def drop_connections_closed_by_server(
    wrappers: Sequence[BaseDatabaseWrapper] | None = None, look: bool = True
) -> None:
    """Drop this thread's connections that the server has already closed.

    An idle connection has nothing to read. When the server ends it (a restart,
    ``pg_terminate_backend``, ``idle_session_timeout``) it sends an error and closes the
    socket, which makes the socket readable. Checked before a handler starts, so a handler
    does not start on a connection that is gone: its first query would fail and cost the
    job an attempt for something the job did not do. No round trip: one ``select`` per
    connection. With ``look=False`` only what psycopg already knows is checked (a connection
    it saw close or break), without the ``select``: see ``Executor`` for when.
    """
    for conn in connections.all(initialized_only=True) if wrappers is None else wrappers:
        raw = conn.connection
        if raw is None or conn.in_atomic_block:
            continue
        try:
            gone = bool(raw.closed or raw.broken)
            if not gone and look:
                readable, _, _ = select.select([raw.fileno()], [], [], 0)
                gone = bool(readable)
        except (OSError, ValueError, AttributeError):
            gone = True
        if gone:
            logger.info("connection %r was closed by the server; reconnecting", conn.alias)
            reset_connection(conn.alias)
