"""The database layer's SQL, as files: what PostgreSQL holds for django-pqjobs besides the
tables Django's migrations create.

- ``schema/``: the live truth. Every function and trigger as it is in a database migrated
  to the newest migration, and who may call each (``privileges.sql``). Read these to know
  what runs in the database; a test migrates a fresh database and fails if the files and
  the catalog differ.
- ``migrations/``: whole files that migrations run (``NNNN_name.up.sql`` and
  ``.down.sql``), frozen once released: a change to a function is a new migration whose file
  holds the new definition, and the same edit in ``schema/``.
- ``queries/``: the statements the Python side sends, one file per module (the state
  machine's, ``transitions/``, by their own names; the others' named after the module),
  each statement under a ``-- name:`` line, read once at import (:func:`queries`).
  Placeholders are psycopg's (``%s``, ``%(name)s``); a ``{name}`` is filled by the module
  that reads it (a predicate it shares). A test fails when a module not on its short
  allow list writes a statement inline (tests/unit/test_one_sql_home.py).
- ``schema/triggers.md``: the trigger index (trigger, table, event, the state arrow it
  causes), checked against the catalog.

In the files, ``:"schema".`` stands for the schema of the job tables (where Django created
them, ``public`` unless the connection's search_path says otherwise): every function pins
its search_path to ``pg_catalog, pg_temp`` and names our objects with their schema, so no
object another role creates is ever looked up in them.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

__all__ = [
    "SCHEMA_FILES",
    "held_by_key",
    "migration",
    "queries",
    "read",
    "render",
    "run",
    "tables_schema",
]

# In the order they are run: functions before the triggers that call them, privileges last.
SCHEMA_FILES = (
    "schema/uniqueness.sql",
    "schema/enqueue.sql",
    "schema/claim.sql",
    "schema/flow.sql",
    "schema/composition.sql",
    "schema/workflows.sql",
    "schema/fairness.sql",
    "schema/history.sql",
    "schema/privileges.sql",
)
PLACEHOLDER = ':"schema".'


def read(name: str) -> str:
    """The text of one file of this package, e.g. ``"schema/claim.sql"``."""
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def tables_schema(cursor: Any) -> str:
    """The schema that holds ``pqjobs_job``, quoted as an identifier if it needs to be."""
    cursor.execute(
        "SELECT quote_ident(n.nspname) FROM pg_class c "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = 'pqjobs_job'::regclass"
    )
    return str(cursor.fetchone()[0])


def render(text: str, schema: str) -> str:
    """``text`` with the placeholder replaced by the schema (as :func:`tables_schema` gives)."""
    return text.replace(PLACEHOLDER, f"{schema}.")


def run(cursor: Any, name: str) -> None:
    """Run one file (all its statements) for the job tables' schema."""
    cursor.execute(render(read(name), tables_schema(cursor)))


def migration(name: str) -> Any:
    """The operation of a migration that runs ``migrations/<name>.up.sql``, and its
    ``.down.sql`` when the migration is unapplied."""
    from django.db.migrations import RunPython

    def forward(apps: Any, schema_editor: Any) -> None:
        with schema_editor.connection.cursor() as cursor:
            run(cursor, f"migrations/{name}.up.sql")

    def backward(apps: Any, schema_editor: Any) -> None:
        with schema_editor.connection.cursor() as cursor:
            run(cursor, f"migrations/{name}.down.sql")

    return RunPython(forward, backward)


_NAME_LINE = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)$", re.MULTILINE)


def queries(module: str) -> dict[str, str]:
    """The named statements of ``queries/<module>.sql``: name -> text (a statement runs
    from its ``-- name:`` line to the next one; its comments go with it). A name given
    twice is an error: a second statement would hide the first."""
    text = read(f"queries/{module}.sql")
    parts = _NAME_LINE.split(text)
    found: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in found:
            raise ValueError(f"queries/{module}.sql names {name!r} twice")
        found[name] = body.strip() + "\n"
    return found


def held_by_key() -> str:
    """The predicate of the unique index of dedupe keys, as ``schema/uniqueness.sql`` has
    it: a job holds its key while this is true of its row. Statements that rely on the
    index (an ON CONFLICT target, a lookup of the job holding a key) repeat it word for
    word, which is how PostgreSQL matches them to the index."""
    found = re.search(r"^    WHERE (.+);$", read("schema/uniqueness.sql"), re.MULTILINE)
    if found is None:
        raise ValueError("schema/uniqueness.sql has no WHERE line")
    return found.group(1)
