"""The two ways a database reaches django-pqjobs' schema: the squashed migration a fresh
database runs (``0001_squashed_0025_fair_claiming``) and the long chain it replaces (what
every database migrated before the squash went through).

The chain is taken with the squash left out of the files Django's migration loader loads
(:func:`without_squash`; ``scripts/squash_migrations.py chain`` does the same for a command),
as the migrations were before the squash. Both run on scratch databases (``CREATE DATABASE
... TEMPLATE template0`` on the tests' server, each on a connection alias of its own), so
the suite's own database and its migration state are never touched.
"""

from __future__ import annotations

import difflib
import glob
import os
import re
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import psycopg
from django.core.management import call_command
from django.db import connection, connections

from tests.helpers import ROOT, bound

SQUASH = "0001_squashed_0025_fair_claiming"


def params(database: str) -> dict[str, object]:
    """psycopg's connection parameters for ``database`` on the tests' server."""
    found = dict(connection.get_connection_params())
    found.pop("cursor_factory", None)
    found["dbname"] = database
    return found


@contextmanager
def scratch_database() -> Iterator[str]:
    """A new, empty database (from template0), dropped after."""
    name = f"pqjobs_paths_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(**params("postgres"), autocommit=True) as admin:  # type: ignore[arg-type]
        admin.execute(f"CREATE DATABASE {name} TEMPLATE template0")
        try:
            yield name
        finally:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")


@contextmanager
def without_squash() -> Iterator[None]:
    """Django's migration loader without this app's squash, while the block runs (what
    ``scripts/squash_migrations.py chain`` does for a whole command)."""
    from django.db.migrations.loader import MigrationLoader

    original = MigrationLoader.load_disk

    def load_disk(self: MigrationLoader) -> None:
        original(self)
        for key, migration in list(self.disk_migrations.items()):
            if key[0] == "django_pqjobs" and migration.replaces:
                del self.disk_migrations[key]

    MigrationLoader.load_disk = load_disk  # type: ignore[method-assign]
    try:
        yield
    finally:
        MigrationLoader.load_disk = original  # type: ignore[method-assign]


def migrate(
    database: str, *target: str, chain: bool = False, search_path: str | None = None
) -> None:
    """``migrate django_pqjobs [target]`` on ``database``: with the squash as Django would
    use it, or (``chain``) through the replaced migrations only; with the connection's
    ``search_path`` if given. In this process, on a connection alias of its own (a new
    process would cost a second of startup each time)."""
    alias = f"paths_{database}"
    default = connections.settings["default"]
    options = dict(default.get("OPTIONS", {}))
    if search_path:
        options["options"] = f"-c search_path={search_path}"
    # Made, then taken out of the settings: Django's test case lets a test use a connection
    # it makes itself, not one of the settings' (pytest-django allows the default only).
    connections.settings[alias] = {
        **default,
        "NAME": database,
        "TEST": {"NAME": database},
        "OPTIONS": options,
    }
    made = connections.create_connection(alias)
    del connections.settings[alias]
    connections[alias] = made
    try:
        with without_squash() if chain else nullcontext():
            call_command("migrate", "django_pqjobs", *target, database=alias, verbosity=0)
    finally:
        made.close()
        del connections[alias]


def _pg_dump() -> str | None:
    """The newest pg_dump on this machine that can dump the tests' server."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version_num")
        server = int(cursor.fetchone()[0]) // 10000
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_dump"), reverse=True)
    candidates += [found] if (found := shutil.which("pg_dump")) else []
    for candidate in candidates:
        version = subprocess.run([candidate, "--version"], capture_output=True, text=True)
        major = re.search(r"(\d+)", version.stdout)
        if major and int(major.group(1)) >= server:
            return candidate
    return None


def pg_dump_usable() -> bool:
    """Whether a pg_dump that can dump the tests' server is installed."""
    return _pg_dump() is not None


def schema(database: str) -> list[str]:
    """``pg_dump --schema-only`` of ``database``: every table, column, default, constraint,
    index, sequence, function (with its body, settings and owner), trigger, comment and
    privilege, as lines (without the dump's random ``\\restrict`` key and its version)."""
    dump = _pg_dump()
    assert dump is not None
    given = params(database)
    info = psycopg.conninfo.make_conninfo(
        **{key: str(given[key]) for key in ("dbname", "host", "port", "user") if given.get(key)}
    )
    env = {**os.environ}
    if given.get("password"):  # (in the environment, not on a command line others can read)
        env["PGPASSWORD"] = str(given["password"])
    done = subprocess.run(
        [dump, "--schema-only", "--dbname", info],
        capture_output=True,
        text=True,
        timeout=bound(60),
        env=env,
    )
    assert done.returncode == 0, f"pg_dump of {database} failed"
    return [
        line
        for line in done.stdout.splitlines()
        if not line.startswith(("\\restrict", "\\unrestrict", "-- Dumped "))
    ]


def differences(first: list[str], second: list[str]) -> str:
    """The first lines of a unified diff of two schemas ('' when they are the same)."""
    diff = list(difflib.unified_diff(first, second, "first", "second", lineterm="", n=2))
    return "\n".join(diff[:80])


def ours(database: str) -> list[tuple[str, str]]:
    """The relations and functions of django-pqjobs in ``database`` (kind, name)."""
    with psycopg.connect(**params(database)) as db:  # type: ignore[arg-type]
        rows = db.execute(
            "SELECT 'relation', relname FROM pg_class WHERE relname LIKE 'pqjobs%%' "
            "UNION ALL SELECT 'function', proname FROM pg_proc WHERE proname LIKE 'pqjobs%%' "
            "ORDER BY 1, 2"
        ).fetchall()
    return [(str(kind), str(name)) for kind, name in rows]


def recorded(database: str) -> set[str]:
    """The names of django-pqjobs' migrations ``database`` records as applied."""
    with psycopg.connect(**params(database)) as db:  # type: ignore[arg-type]
        rows = db.execute(
            "SELECT name FROM django_migrations WHERE app = 'django_pqjobs'"
        ).fetchall()
    return {str(name) for (name,) in rows}


def migration_names() -> list[str]:
    """The chain's migration names, in order (the squash left out)."""
    directory = Path(ROOT / "django_pqjobs" / "migrations")
    names = sorted(path.stem for path in directory.glob("0*.py"))
    return [name for name in names if name != SQUASH]
