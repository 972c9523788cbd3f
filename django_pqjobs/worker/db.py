"""Connection hygiene for long-running worker threads."""

from __future__ import annotations

import logging
import select

from django.db import DatabaseError, InterfaceError, OperationalError, connections

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


def drop_connections_closed_by_server() -> None:
    """Drop this thread's connections that the server has already closed.

    An idle connection has nothing to read. When the server ends it (a restart,
    ``pg_terminate_backend``, ``idle_session_timeout``) it sends an error and closes the
    socket, which makes the socket readable. Checked before every handler, so a handler
    never starts on a connection that is gone: its first query would fail and cost the job
    an attempt for something the job did not do. No round trip: one ``select`` per
    connection.
    """
    for conn in connections.all(initialized_only=True):
        raw = conn.connection
        if raw is None or conn.in_atomic_block:
            continue
        try:
            gone = bool(raw.closed or raw.broken)
            if not gone:
                readable, _, _ = select.select([raw.fileno()], [], [], 0)
                gone = bool(readable)
        except (OSError, ValueError, AttributeError):
            gone = True
        if gone:
            logger.info("connection %r was closed by the server; reconnecting", conn.alias)
            reset_connection(conn.alias)
