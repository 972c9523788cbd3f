"""``django_pqjobs/sql/schema/`` is what ``migrate`` produces: the files cannot drift.

On both paths to the schema: the suite's database, migrated from scratch (a fresh database
runs the squashed migration), and a scratch database migrated through the long chain the
squash replaces (tests/migration_paths.py). Running every schema file again over each
(inside a transaction that is rolled back) must change nothing the catalog says about our
functions and triggers: their definitions, settings, owners and privileges; and the files
must name every function and trigger the database has.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction

from django_pqjobs import sql
from tests import migration_paths as paths
from tests.helpers import ROOT

pytestmark = pytest.mark.django_db(transaction=True)

_CATALOG = """
SELECT 'function ' || p.oid::regprocedure::text,
       pg_get_functiondef(p.oid) || ' owner=' || pg_get_userbyid(p.proowner)
       || ' acl=' || coalesce(p.proacl::text, 'default')
FROM pg_proc p WHERE p.pronamespace = %(schema)s::regnamespace AND p.proname LIKE 'pqjobs%%'
UNION ALL
SELECT 'trigger ' || t.tgname || ' on ' || t.tgrelid::regclass::text,
       pg_get_triggerdef(t.oid) || ' enabled=' || t.tgenabled::text
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE NOT t.tgisinternal AND c.relnamespace = %(schema)s::regnamespace
  AND c.relname LIKE 'pqjobs%%'
ORDER BY 1
"""


def catalog(cursor: Any, schema: str) -> dict[str, str]:
    cursor.execute(_CATALOG, {"schema": schema})
    return dict(cursor.fetchall())


@dataclass
class Migrated:
    """A cursor on a migrated database, and a block whose changes are rolled back."""

    cursor: Any
    rolled_back: Any  # () -> a context manager


@pytest.fixture(scope="module")
def chain_database(django_db_blocker: Any) -> Iterator[str]:
    """A scratch database migrated to the last migration through the long chain."""
    with django_db_blocker.unblock(), paths.scratch_database() as database:
        paths.migrate(database, chain=True)
        yield database


@pytest.fixture(params=["squash", "chain"])
def migrated(request: pytest.FixtureRequest) -> Iterator[Migrated]:
    if request.param == "squash":
        with connection.cursor() as cursor:
            # the suite's database: fresh, so migrate ran the squash
            cursor.execute("SELECT 1 FROM django_migrations WHERE name = %s", [paths.SQUASH])
            assert cursor.fetchone() is not None

            @contextmanager
            def atomic() -> Iterator[None]:
                with transaction.atomic():
                    yield
                    transaction.set_rollback(True)

            yield Migrated(cursor, atomic)
        return
    database = request.getfixturevalue("chain_database")
    assert paths.SQUASH not in paths.recorded(database)
    with psycopg.connect(**paths.params(database)) as db, db.cursor() as cursor:  # type: ignore[arg-type]

        def rolled_back() -> AbstractContextManager[Any]:
            return db.transaction(force_rollback=True)

        yield Migrated(cursor, rolled_back)


def test_the_schema_files_are_what_migrate_made(migrated: Migrated):
    cursor = migrated.cursor
    schema = sql.tables_schema(cursor)
    before = catalog(cursor, schema)
    with migrated.rolled_back():
        # as PostgreSQL gives every new function: the files must take it back
        cursor.execute(
            "SELECT string_agg(p.oid::regprocedure::text, ', ') FROM pg_proc p "
            "WHERE p.pronamespace = %s::regnamespace AND p.proname LIKE 'pqjobs%%'",
            [schema],
        )
        cursor.execute(f"GRANT EXECUTE ON FUNCTION {cursor.fetchone()[0]} TO PUBLIC")
        for name in sql.SCHEMA_FILES:
            sql.run(cursor, name)
        after = catalog(cursor, schema)
    changed = sorted(
        key for key in before.keys() | after.keys() if before.get(key) != after.get(key)
    )
    assert changed == [], f"the schema files differ from the migrated database on {changed}"


def test_the_schema_files_name_every_function_and_trigger(migrated: Migrated):
    text = "\n".join(sql.read(name) for name in sql.SCHEMA_FILES)
    functions = set(re.findall(r'CREATE OR REPLACE FUNCTION :"schema"\.(\w+)\(', text))
    triggers = set(re.findall(r"CREATE (?:CONSTRAINT )?TRIGGER (\w+)", text))
    names = catalog(migrated.cursor, sql.tables_schema(migrated.cursor)).keys()
    assert {name.split()[1].split("(")[0] for name in names if name.startswith("function")} == (
        functions
    )
    assert {name.split()[1] for name in names if name.startswith("trigger")} == triggers
    assert len(functions) == 24 and len(triggers) == 14


def test_every_object_of_ours_is_named_with_its_schema():
    """With search_path pinned to pg_catalog, pg_temp, an unqualified table would be looked
    up in the caller's temporary schema: every name of ours carries the placeholder (the
    transition tables of the statement triggers excepted: they are no schema's)."""
    for name in sql.SCHEMA_FILES:
        code = re.sub(r"--[^\n]*", "", sql.read(name))
        # (a name before one colon starts an error message: "pqjobs_enqueue: ...")
        bare = re.findall(r'(?<![."\w])(pqjobs_\w+)\b(?!\s*(?:ON|AS|$)|:(?!:))', code)
        # transition tables, the channel, the key of an encrypted value's envelope, the
        # prefixes of history partitions' names (made with the schema: history.sql) and the
        # name of its advisory lock
        allowed = {"pqjobs_old", "pqjobs_new", "pqjobs_finished", "pqjobs_encrypted"}
        allowed |= {"pqjobs_job_", "pqjobs_attempt_", "pqjobs_history"}
        triggers = set(re.findall(r"TRIGGER (?:IF EXISTS )?(\w+)", code))
        assert set(bare) - allowed - triggers == set(), name


def test_every_named_statement_is_used_and_parses():
    """Each statement of sql/queries/ is sent by the module that loads its file, and
    PostgreSQL parses it (PREPARE checks names and types without running anything). A
    statement its module completes (a ``{name}`` it fills in: a column, a shelf filter) is
    parsed by that module's own tests."""
    sources = {
        path: path.read_text()
        for path in (ROOT / "django_pqjobs").rglob("*.py")
        if "migrations" not in path.parts
    }
    for path in sorted((ROOT / "django_pqjobs" / "sql" / "queries").glob("*.sql")):
        loaders = [text for text in sources.values() if f'queries("{path.stem}")' in text]
        assert loaders, f"{path.name}: no module loads it"
        source = "\n".join(loaders)
        sends_all = f'queries("{path.stem}").items()' in source
        for name, text in sql.queries(path.stem).items():
            assert sends_all or f'["{name}"]' in source, f"{path.name}: {name} is never sent"
            statement = re.sub(r"%\(\w+\)s|%s", "NULL", text.replace("{queue_filter}", ""))
            statement = statement.replace("{priority_filter}", "").replace("%%", "%")
            statement = statement.replace("{held_by_key}", sql.held_by_key())
            body = "\n".join(line for line in statement.splitlines() if not line.startswith("--"))
            plannable = re.match(r"\s*(SELECT|INSERT|UPDATE|DELETE|WITH|VALUES)\b", body, re.I)
            if re.search(r"\{[a-z_]+\}", body) or not plannable:
                continue  # completed by its module, or a command PREPARE does not take
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute(f"PREPARE pqjobs_parse_check AS {statement}")
                cursor.execute("DEALLOCATE pqjobs_parse_check")
                transaction.set_rollback(True)


def test_a_name_given_twice_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(sql, "read", lambda name: "-- name: a\nSELECT 1\n-- name: a\nSELECT 2\n")
    with pytest.raises(ValueError, match="names 'a' twice"):
        sql.queries("anything")
