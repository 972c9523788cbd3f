"""What the database must know of the job types declared in code: which are encrypted
(the table ``pqjobs_protected_type``), so that ``pqjobs_enqueue()`` refuses a payload of
one that is not sealed, from SQL callers that cannot seal it.

``manage.py migrate`` publishes it after migrating (``post_migrate``), with the migrating
role's rights: the rows of the job types this code registers are made to match their
declarations; rows of job types it does not register (another service's) are kept.
"""

from __future__ import annotations

from typing import Any

from django.db import connections, transaction

from .conf import conf
from .registry import registry
from .serialization import from_json, to_json
from .sql import queries

QUERIES = queries("declarations")

_EXISTS = QUERIES["exists"]
_UPSERT = QUERIES["upsert"]
_FORGET = QUERIES["forget"]


def _declared() -> tuple[dict[str, str | None], list[str]]:
    """The encrypted types this process registers (fields as JSON text, or None: whole),
    and the others."""
    protected: dict[str, str | None] = {}
    plain: list[str] = []
    for job_type in registry.all():
        if job_type.encrypted is True:
            protected[job_type.name] = None
        elif job_type.encrypted:
            protected[job_type.name] = to_json(list(job_type.encrypted), "fields", None, "")
        else:
            plain.append(job_type.name)
    return protected, plain


def unpublished(using: str) -> list[str]:
    """The encrypted job types this process registers that ``pqjobs_protected_type`` of
    database ``using`` does not list as declared (SQL enqueues of them are not refused
    until ``migrate`` runs); none when it has no such table (not migrated: said elsewhere)."""
    protected, _ = _declared()
    if not protected:
        return []
    with connections[using].cursor() as cursor:
        cursor.execute(_EXISTS)
        if not cursor.fetchone()[0]:
            return []
        cursor.execute(
            QUERIES["unpublished"],
            [list(protected)],
        )
        listed = {name: fields for name, fields in cursor.fetchall()}
    return sorted(
        name
        for name, fields in protected.items()
        if name not in listed or _same_fields(listed[name], fields) is False
    )


def _same_fields(stored: str | None, declared: str | None) -> bool:
    if stored is None or declared is None:
        return stored is declared
    return bool(from_json(stored) == from_json(declared))


def publish(using: str) -> bool:
    """Write the encrypted job types this process registers to ``pqjobs_protected_type``
    of database ``using``; False when it has no such table (not migrated that far)."""
    protected, plain = _declared()
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(_EXISTS)
        if not cursor.fetchone()[0]:
            return False
        for name, fields in sorted(protected.items()):
            cursor.execute(_UPSERT, [name, fields])
        if plain:
            cursor.execute(_FORGET, [plain])
    return True


def publish_after_migrate(using: str = "default", **kwargs: Any) -> None:
    """The ``post_migrate`` receiver: publish to the database just migrated, if it holds
    the job tables."""
    if using == conf.DATABASE:
        publish(using)
