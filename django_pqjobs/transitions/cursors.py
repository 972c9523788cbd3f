"""The cursors the state machine's statements run on."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections


def cursor_of(alias: str) -> Any:
    return connections[alias].cursor()


_kept = threading.local()  # per thread and alias: the psycopg cursor batch_cursor keeps


@contextmanager
def batch_cursor(alias: str) -> Iterator[Any]:
    """The cursor of the worker's two statements per claimed batch, the claim and the
    completion: the psycopg cursor of this thread's connection, made once and used again,
    with Django's translation of database errors.

    Django's cursor wrapper, made anew for each statement, cost a worker under a stream of
    enqueues more per batch than the rest of the statement's Python. What it adds is not
    wanted for statements sent a hundred times a second: query logging under ``DEBUG``
    (which would fill memory) and ``execute_wrapper`` instrumentation.
    """
    wrapper = connections[alias]
    wrapper.ensure_connection()
    connection = wrapper.connection
    cursor = getattr(_kept, alias, None)
    if cursor is None or cursor.connection is not connection or cursor.closed:
        cursor = connection.cursor()
        setattr(_kept, alias, cursor)
    with wrapper.wrap_database_errors:
        yield cursor
