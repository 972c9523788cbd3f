"""The squashed migration of django-pqjobs, and the long chain it replaces.

    python scripts/squash_migrations.py chain migrate [args]   # manage.py without the squash
    python scripts/squash_migrations.py generate               # write the squash again

A fresh database runs ``0001_squashed_0025_fair_claiming`` (Django's ``replaces``): the
schema of migrations 0001-0025 as one frozen SQL file, and the model state they build.
Databases that had some of 0001-0025 applied keep going through the chain; so does a
backward migration to one of the replaced names (Django reloads the graph without the
squash). See docs/architecture.md, "Migrations and the squash".

``chain`` runs a ``django-admin`` command with the squash left out of the migration files
Django loads (it patches ``MigrationLoader.load_disk``), as the migrations were before the
squash: benchmarks/migrate_time.py times the two paths with it (the tests do the same in
their process: tests/migration_paths.py).

``generate`` migrates a scratch database (``CREATE DATABASE ... TEMPLATE template0`` on the
server of ``DATABASE_URL``, dropped after) through the chain up to the last replaced
migration, and writes, from ``pg_dump --schema-only`` of it,
``django_pqjobs/sql/migrations/<squash>.up.sql`` (tables with their keys and indexes, then
functions, foreign keys, triggers and privileges, the schema as the ``:"schema".``
placeholder) and ``.down.sql``, and from Django's migration state at that migration the
squash's state operations (``django_pqjobs/migrations/<squash>.py``). Django settings come
from ``DJANGO_SETTINGS_MODULE`` (default ``tests.settings``). Run it only to squash further
(``--upto``); the files it wrote are frozen once released, like every migration.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
APP = "django_pqjobs"
PLACEHOLDER = ':"schema".'


def leave_out_squashes() -> None:
    """Make Django's migration loader skip this app's squashed migrations (those with
    ``replaces``): the graph is the long chain, as before the squash."""
    from django.db.migrations import loader

    original = loader.MigrationLoader.load_disk

    def load_disk(self: Any) -> None:
        original(self)
        for key, migration in list(self.disk_migrations.items()):
            if key[0] == APP and migration.replaces:
                del self.disk_migrations[key]

    loader.MigrationLoader.load_disk = load_disk  # type: ignore[method-assign]


def chain(args: list[str]) -> None:
    """``django-admin <args>`` with the squash left out."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    leave_out_squashes()
    from django.core.management import execute_from_command_line

    execute_from_command_line(["django-admin", *args])


# --- generate ------------------------------------------------------------------------------

_ENTRY = re.compile(r"^--\n-- Name: (.+?); Type: (.+?); Schema: [^;\n]+; Owner: [^\n]*\n--\n", re.M)


def _entries(dump: str) -> list[tuple[str, str, str]]:
    """(name, type, statement text) of each object of a pg_dump, in its order."""
    # psql meta-commands (restrict, unrestrict) and the closing comment are no object's
    dump = re.sub(r"^\\.*$|^-- PostgreSQL database dump complete$", "", dump, flags=re.M)
    parts = _ENTRY.split(dump)
    found = []
    for name, kind, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        body = body.strip()
        while body.endswith("\n--"):  # the closing comment's frame
            body = body[:-3].strip()
        found.append((name, kind, body + "\n"))
    return found


def _table_of(name: str, kind: str, text: str) -> str | None:
    """The table an entry belongs to (a table, its sequence, key or index), else None."""
    if kind == "TABLE":
        return name
    found = re.search(r"(?:ALTER TABLE (?:ONLY )?|\bON )public\.(\w+)", text)
    return found.group(1) if found else None


_IN_LIST = re.compile(
    r"\(([\w.]+)\)::text (= ANY|<> ALL) \(\(ARRAY\[((?:'[^']*'::character varying(?:, )?)+)\]\)"
    r"::text\[\]\)"
)


def _as_written(text: str) -> str:
    """``x IN ('a', 'b')`` where pg_dump deparsed it: what the dump gives,
    ``(x)::text = ANY ((ARRAY['a'::character varying, ...])::text[])``, parses into another
    expression tree (casts on each element), and the schema would differ from the chain's."""

    def written(found: re.Match[str]) -> str:
        items = found.group(3).replace("::character varying", "")
        return f"{found.group(1)} {'IN' if found.group(2) == '= ANY' else 'NOT IN'} ({items})"

    return _IN_LIST.sub(written, text)


def up_sql(dump: str, squash: str) -> str:
    """The frozen schema: the dump regrouped, table by table, then functions, foreign keys,
    triggers and privileges, with the placeholder for the schema."""
    tables: dict[str, list[str]] = {}
    functions, foreign_keys, triggers, privileges = [], [], [], []
    for name, kind, text in _entries(dump):
        if kind != "FUNCTION":  # (a function's body is its source text, as written)
            text = _as_written(text)
        if kind == "TABLE":
            tables.setdefault(name, []).insert(0, text)
        elif kind in ("SEQUENCE", "CONSTRAINT", "INDEX"):
            table = _table_of(name, kind, text)
            assert table is not None, (name, kind)
            tables.setdefault(table, []).append(text)
        elif kind == "FUNCTION":
            functions.append(text)
        elif kind == "FK CONSTRAINT":
            foreign_keys.append(text)
        elif kind == "TRIGGER":
            triggers.append(text)
        elif kind == "ACL":
            privileges.append(text)
        else:
            raise ValueError(f"pg_dump gave a {kind} ({name}): add it to the squash")
    sections = [
        f"-- {squash}: the schema of migrations {squash[:4]}-{squash.split('_')[2]} in one file,\n"
        "-- for a fresh database (generated by scripts/squash_migrations.py from pg_dump\n"
        "-- --schema-only of a database migrated through them; frozen: never edit it).\n"
        "-- The functions' bodies are the texts those migrations' files gave; their\n"
        "-- comments are there (django_pqjobs/sql/migrations/, and\n"
        "-- django_pqjobs/migrations/ before 0016).\n"
    ]
    for table, texts in sorted(tables.items()):
        sections.append(f"-- {'=' * 86}\n-- {table}\n\n" + "\n".join(texts))
    sections.append(
        "-- " + "=" * 86 + "\n"
        "-- Functions (before the triggers that call them). Every one pins its\n"
        "-- search_path to pg_catalog, pg_temp and names our tables with their schema.\n\n"
        + "\n".join(functions)
    )
    sections.append("-- " + "=" * 86 + "\n-- Foreign keys\n\n" + "\n".join(foreign_keys))
    sections.append("-- " + "=" * 86 + "\n-- Triggers\n\n" + "\n".join(triggers))
    sections.append(
        "-- " + "=" * 86 + "\n-- Privileges: no function is PUBLIC's (see\n"
        "-- django_pqjobs/sql/schema/privileges.sql for who may call each).\n\n"
        + "\n".join(privileges)
    )
    text = "\n\n".join(sections)
    text = re.sub(r"\bpublic\.", PLACEHOLDER, text)
    assert "public" not in text.replace("FROM PUBLIC", ""), "a name of the schema is left"
    return text


def down_sql(dump: str, squash: str) -> str:
    """Drops every table and function the up file makes (the tables' keys, indexes, triggers
    and sequences go with them)."""
    tables = sorted(name for name, kind, _ in _entries(dump) if kind == "TABLE")
    functions = sorted(name for name, kind, _ in _entries(dump) if kind == "FUNCTION")
    lines = [f"-- {squash}, undone: every table and function of the up file.\n"]
    lines += [f"DROP TABLE {PLACEHOLDER}{name} CASCADE;\n" for name in tables]
    lines += [f"DROP FUNCTION {PLACEHOLDER}{name};\n" for name in functions]
    return "".join(lines)


def state_operations(upto: str) -> tuple[list[str], set[str]]:
    """Django's model state after ``upto`` (through the chain), as the operations that make
    it from nothing (what makemigrations writes for a new app), serialized."""
    from django.db.migrations.autodetector import MigrationAutodetector
    from django.db.migrations.loader import MigrationLoader
    from django.db.migrations.state import ProjectState
    from django.db.migrations.writer import OperationWriter

    loader = MigrationLoader(None, ignore_no_migrations=True)
    state = loader.project_state((APP, upto), at_end=True)
    detector = MigrationAutodetector(ProjectState(), state)
    changes = detector._detect_changes()
    operations, imports = [], set()
    for migration in changes[APP]:
        for operation in migration.operations:
            text, needed = OperationWriter(operation, indentation=0).serialize()
            operations.append(text)
            imports |= needed
    return operations, imports


_MIGRATION = '''"""Migrations {first}-{last} in one, for a fresh database: the schema they build, as
one frozen SQL file (``django_pqjobs/sql/migrations/{name}.up.sql``),
and the model state they leave. Written by ``scripts/squash_migrations.py generate``; never
edit it.

A database that has some of them applied goes on through them (Django uses a squash only
where all or none of what it replaces is applied); migrating back to one of them reloads the
graph without the squash. Migrations after {last} depend on {last_name}, which
Django maps to this one. See docs/architecture.md, "Migrations and the squash".
"""

{imports}

from django_pqjobs import sql


def forward(apps: Any, schema_editor: Any) -> None:
    """The up file, for the schema Django creates tables in (no table of ours exists yet)."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT quote_ident(current_schema())")
        schema = cursor.fetchone()[0]
        cursor.execute(sql.render(sql.read("migrations/{name}.up.sql"), schema))


def backward(apps: Any, schema_editor: Any) -> None:
    """The down file: drops every table and function of ours."""
    with schema_editor.connection.cursor() as cursor:
        sql.run(cursor, "migrations/{name}.down.sql")


class Migration(migrations.Migration):
    initial = True

    replaces = [
{replaces}
    ]

    dependencies = []

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[migrations.RunPython(forward, backward)],
            state_operations=[
{operations}
            ],
        ),
    ]
'''


def generate(upto_prefix: str) -> None:
    """Write the squash of this app's migrations up to ``upto_prefix`` (e.g. ``0025``)."""
    import django
    import psycopg

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")
    leave_out_squashes()
    django.setup()
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    names = sorted(name for app, name in loader.disk_migrations if app == APP)
    upto = next(name for name in names if name.startswith(upto_prefix))
    replaced = names[: names.index(upto) + 1]
    squash = f"{replaced[0][:4]}_squashed_{upto}"

    url = os.environ["DATABASE_URL"]
    parts = urlsplit(url)
    scratch = f"pqjobs_squash_{uuid.uuid4().hex[:8]}"
    scratch_url = urlunsplit(parts._replace(path=f"/{scratch}"))
    admin_url = urlunsplit(parts._replace(path="/postgres"))
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {scratch} TEMPLATE template0")
        try:
            subprocess.run(
                [sys.executable, __file__, "chain", "migrate", APP, upto, "--verbosity", "0"],
                env={**os.environ, "DATABASE_URL": scratch_url},
                cwd=ROOT,
                check=True,
            )
            dump = subprocess.run(
                ["pg_dump", "--schema-only", "--no-owner", "--exclude-table=django_migrations",
                 "--dbname", scratch_url],
                capture_output=True, text=True, check=True,
            ).stdout  # fmt: skip
        finally:
            admin.execute(f"DROP DATABASE {scratch} WITH (FORCE)")

    sql_dir = ROOT / APP / "sql" / "migrations"
    (sql_dir / f"{squash}.up.sql").write_text(up_sql(dump, squash), encoding="utf-8")
    (sql_dir / f"{squash}.down.sql").write_text(down_sql(dump, squash), encoding="utf-8")

    operations, imports = state_operations(upto)
    imports |= {"from django.db import migrations", "from typing import Any"}
    plain = sorted(i for i in imports if i.startswith("import "))
    froms = sorted(i for i in imports if i.startswith("from "))
    text = _MIGRATION.format(
        first=replaced[0][:4],
        last=upto[:4],
        last_name=upto,
        name=squash,
        imports="\n".join([*plain, "", *froms]) if plain else "\n".join(froms),
        replaces="\n".join(f'        ("{APP}", "{name}"),' for name in replaced),
        operations="\n".join(
            "\n".join(("            " + line) if line else line for line in op.splitlines()) + ","
            for op in (o.strip().rstrip(",") for o in operations)
        ),
    )
    path = ROOT / APP / "migrations" / f"{squash}.py"
    path.write_text(text, encoding="utf-8")
    ruff = Path(sys.executable).parent / "ruff"  # the lint extra's
    if ruff.exists():
        subprocess.run([ruff, "check", "--quiet", "--fix", "--select", "I", path], check=True)
        subprocess.run([ruff, "format", "--quiet", path], check=True)
    print(f"wrote {squash} (replaces {len(replaced)} migrations)")


def main() -> None:
    sys.path[:0] = [str(ROOT), str(ROOT / "testproject")]
    if len(sys.argv) > 1 and sys.argv[1] == "chain":
        chain(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate", help="write the squash again")
    gen.add_argument("--upto", default="0025", help="the last migration it replaces")
    sub.add_parser("chain", help="run a django-admin command without the squash")
    args = parser.parse_args()
    generate(args.upto)


if __name__ == "__main__":
    main()
