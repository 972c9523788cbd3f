"""The database clock: ``now()`` of PostgreSQL is the only clock django-pqjobs trusts."""

from __future__ import annotations

from datetime import datetime

from django.db import connections

from .sql import queries

QUERIES = queries("clock")


def database_now(alias: str) -> datetime:
    """``SELECT now()`` on ``alias`` (the transaction's start time inside a transaction)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(QUERIES["database_now"])
        value: datetime = cursor.fetchone()[0]
        return value
