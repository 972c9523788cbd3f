"""The database clock: ``now()`` of PostgreSQL is the only clock django-pqjobs trusts."""

from __future__ import annotations

from datetime import datetime

from django.db import connections


def database_now(alias: str) -> datetime:
    """``SELECT now()`` on ``alias`` (the transaction's start time inside a transaction)."""
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT now()")
        value: datetime = cursor.fetchone()[0]
        return value
