"""Is the job database ready? One-line answers for a project that cannot connect to it,
forgot ``migrate``, points the job tables at a database other than PostgreSQL, or keeps them
in a schema every role may write.

Checked where it costs nothing on the way that works: enqueueing looks at the connection's
vendor (an attribute) and reads a database error only once one happened; ``run_jobs`` asks
once, at start, whether it can connect and which migrations of the app are not applied.
"""

from __future__ import annotations

from django.apps import apps
from django.conf import settings
from django.db import DatabaseError, OperationalError, connections, transaction

from .errors import DatabaseNotReady
from .sql import queries

QUERIES = queries("schema")

APP_LABEL = "django_pqjobs"
# SQLSTATEs of a statement naming a function, table, column or type (the job row,
# pqjobs_job_spec) the database does not have.
_MISSING_OBJECT = {"42883", "42P01", "42703", "42704"}


def require_postgresql(alias: str) -> None:
    """Raise :class:`DatabaseNotReady` unless ``alias`` is a PostgreSQL database."""
    vendor = connections[alias].vendor
    if vendor != "postgresql":
        engine = settings.DATABASES.get(alias, {}).get("ENGINE", "?")
        raise DatabaseNotReady(
            f"django-pqjobs needs PostgreSQL, but the job database {alias!r} is {vendor} "
            f"({engine}): make DATABASES[{alias!r}] a PostgreSQL database, or point "
            "PQJOBS['DATABASE'] at one"
        )


def require_reachable(alias: str) -> None:
    """Open the connection to ``alias``; raise :class:`DatabaseNotReady`, one line, when it
    cannot be opened (a wrong database name, user, password, host or port; the server down).
    """
    try:
        connections[alias].ensure_connection()
    except OperationalError as exc:
        raise _cannot_connect(exc, alias) from None


def unreachable(exc: DatabaseError, alias: str) -> DatabaseNotReady | None:
    """The error to raise instead of ``exc`` when it says no connection to ``alias`` could
    be opened; None when ``exc`` happened on an open connection."""
    if not isinstance(exc, OperationalError) or connections[alias].connection is not None:
        return None
    return _cannot_connect(exc, alias)


def _cannot_connect(exc: OperationalError, alias: str) -> DatabaseNotReady:
    # psycopg's message spans lines (a hint on a tab-indented line, then one paragraph per
    # address tried): the first paragraph, on one line, says it.
    said = str(exc).split("\nMultiple connection attempts failed")[0]
    said = " ".join(said.split())
    for prefix in ("connection failed: ", "connection is bad: "):
        said = said.removeprefix(prefix)
    return DatabaseNotReady(
        f"cannot connect to database {alias!r}: {said or type(exc).__name__} "
        f"(see DATABASES[{alias!r}])"
    )


def not_migrated(exc: DatabaseError, alias: str) -> DatabaseNotReady | None:
    """The error to raise instead of ``exc`` when it says the job tables or the enqueue
    function are missing or older than this code (``migrate`` not run); else None."""
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    said = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if sqlstate not in _MISSING_OBJECT or "pqjobs" not in said:
        return None
    return DatabaseNotReady(
        f"the job tables of database {alias!r} are missing or out of date: run "
        f"`manage.py migrate` (PostgreSQL said: {said})"
    )


def missing_migrations(alias: str) -> list[str]:
    """The migrations ``migrate`` would still apply for this app on ``alias`` (with those of
    other apps they need), e.g. ``["django_pqjobs.0012_operator_audit"]``.

    Where this role may not read ``django_migrations`` (a worker with only its grants), it
    says which of the app's tables are missing instead.
    """
    connection = connections[alias]
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        # NULL when there is no such table yet: nothing was migrated, which Django can tell
        cursor.execute(QUERIES["missing_migrations"])
        readable = cursor.fetchone()[0]
    if readable is False:
        return _missing_tables(alias)
    from django.db.migrations.executor import MigrationExecutor  # loads every app's migrations

    executor = MigrationExecutor(connection)
    targets = [key for key in executor.loader.graph.leaf_nodes() if key[0] == APP_LABEL]
    return [
        f"{migration.app_label}.{migration.name}"
        for migration, backwards in executor.migration_plan(targets)
        if not backwards
    ]


def _missing_tables(alias: str) -> list[str]:
    existing = set(connections[alias].introspection.table_names())
    return sorted(
        f"table {model._meta.db_table}"
        for model in apps.get_app_config(APP_LABEL).get_models()
        if model._meta.db_table not in existing
    )


def writable_by_everyone(alias: str) -> str | None:
    """The schema holding the job tables if PUBLIC (every role) may CREATE in it, else None.

    PostgreSQL 14 and older grant that on ``public`` by default, and upgraded databases
    keep it. Our functions never look objects up there (their search_path is pinned), but
    any role could plant functions or operators that the application's own queries, and
    those of other tools, resolve to (CVE-2018-1058). None too while the tables are missing.
    """
    with connections[alias].cursor() as cursor:
        cursor.execute(QUERIES["writable_by_everyone"])
        row = cursor.fetchone()
    return None if row is None else str(row[0])


# Names in the job tables' schema that pqjobs_history_prepare() would make (history.sql)
# held by anything but our partitions: a table, view or type another role made first.
_SQUATTED = QUERIES["squatted"]


def squatted_partition_names(alias: str) -> list[tuple[str, str]]:
    """The names of history partitions (``pqjobs_job_done_20261127_1``) that something other
    than our partition holds, each with its owner: a role that may CREATE in the schema
    made it first, and the history of that status and span cannot be made until it goes
    (``pqjobs_history_prepare`` fails naming it; the finished jobs stay in the hot table)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(_SQUATTED)
        return [(str(name), str(owner)) for name, owner in cursor.fetchall()]


def squatted_advice(names: list[tuple[str, str]]) -> str:
    """What to do about :func:`squatted_partition_names`, in one line."""
    listed = ", ".join(f"{name} (owner {owner})" for name, owner in names)
    return (
        f"history partition names taken by objects that are not ours: {listed}; the jobs "
        "of their spans stay in the hot table until they are dropped or renamed (and "
        "REVOKE CREATE on the schema from the roles that made them)"
    )


def open_schema_advice(schema: str) -> str:
    """What to do about :func:`writable_by_everyone`, in one line."""
    quoted = '"' + schema.replace('"', '""') + '"'
    return (
        f"every database role may CREATE in schema {schema!r}, which holds the job tables: "
        "any role can plant functions or operators there that queries resolve to "
        f"(CVE-2018-1058); run REVOKE CREATE ON SCHEMA {quoted} FROM PUBLIC"
    )
