"""Connection hygiene for long-running worker threads."""

from __future__ import annotations

import logging

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
