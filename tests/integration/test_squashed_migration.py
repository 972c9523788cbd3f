"""The squashed migration (``0001_squashed_0025_fair_claiming``) ends where the long chain
does, and databases on either path keep migrating both ways.

A fresh database runs the squash; the chain is taken with the squash left out of Django's
migration loader (tests/migration_paths.py; ``scripts/squash_migrations.py chain`` does
the same for a command).
Schemas are compared whole, as ``pg_dump --schema-only`` gives them: tables, columns,
defaults, constraints, indexes, sequences and their owners, functions with their bodies,
settings (search_path), SECURITY DEFINER and owners, triggers, comments and privileges.
Each test works on scratch databases of its own (from template0, dropped after).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest

from tests import migration_paths as paths

pytestmark = pytest.mark.django_db

REPLACED = [name for name in paths.migration_names() if name <= "0025_fair_claiming"]


@dataclass
class Reference:
    """The schemas the squash gives a fresh database: right after it, and at the end."""

    at_squash: list[str]
    at_last: list[str]


@pytest.fixture(scope="module")
def reference(django_db_blocker: Any) -> Iterator[Reference]:
    with django_db_blocker.unblock():
        if not paths.pg_dump_usable():
            pytest.skip("no pg_dump on this machine can dump the tests' server")
    with django_db_blocker.unblock(), paths.scratch_database() as database:
        paths.migrate(database, paths.SQUASH)
        at_squash = paths.schema(database)
        # the squash stands for every migration it replaces, and is recorded itself
        assert paths.recorded(database) == {*REPLACED, paths.SQUASH}
        paths.migrate(database)
        yield Reference(at_squash, paths.schema(database))


def test_the_squash_replaces_0001_to_0025_and_is_what_a_fresh_database_runs():
    from django.db.migrations.loader import MigrationLoader

    loader = MigrationLoader(None, ignore_no_migrations=True)
    squash = loader.disk_migrations[("django_pqjobs", paths.SQUASH)]
    assert [name for _, name in squash.replaces] == REPLACED
    # on a database with none of them applied, the graph has the squash and not them
    assert ("django_pqjobs", paths.SQUASH) in loader.graph.nodes
    assert ("django_pqjobs", "0001_initial") not in loader.graph.nodes
    # the migrations after 0025 hang on the squash (Django remaps their dependency)
    after = ("django_pqjobs", paths.migration_names()[len(REPLACED)])
    nodes = loader.graph.node_map
    assert nodes[after].parents == {nodes[("django_pqjobs", paths.SQUASH)]}


def test_the_squash_leaves_the_model_state_the_chain_leaves():
    """What makemigrations compares models with: the same state at the squash as at 0025
    through the chain, model by model (fields, options, indexes, constraints, managers)."""
    from django.db.migrations.loader import MigrationLoader

    squashed = MigrationLoader(None, ignore_no_migrations=True).project_state(
        ("django_pqjobs", paths.SQUASH), at_end=True
    )
    chained = MigrationLoader(None, ignore_no_migrations=True, replace_migrations=False)
    chain_state = chained.project_state(("django_pqjobs", REPLACED[-1]), at_end=True)
    assert sorted(squashed.models) == sorted(chain_state.models)
    for key, model in chain_state.models.items():
        assert squashed.models[key] == model, key


@pytest.mark.slow  # a few seconds: whole migrations, several times
def test_the_squash_and_the_chain_build_the_same_schema(reference: Reference):
    with paths.scratch_database() as database:
        paths.migrate(database, REPLACED[-1], chain=True)
        assert paths.SQUASH not in paths.recorded(database)  # it did go through the chain
        chain = paths.schema(database)
        assert chain == reference.at_squash, paths.differences(chain, reference.at_squash)
        paths.migrate(database, chain=True)
        chain = paths.schema(database)
        assert chain == reference.at_last, paths.differences(chain, reference.at_last)


@pytest.mark.slow  # a few seconds: whole migrations, several times
def test_databases_part_way_and_squashed_ones_migrate_on_and_back(reference: Reference):
    with paths.scratch_database() as old, paths.scratch_database() as new:
        # a database migrated to 0010 before the squash existed goes on with the squash
        # present: part of what it replaces is applied, so Django takes 0011-0025
        paths.migrate(old, "0010", chain=True)
        paths.migrate(old)
        assert paths.recorded(old) == {*paths.migration_names(), paths.SQUASH}
        schema = paths.schema(old)
        assert schema == reference.at_last, paths.differences(schema, reference.at_last)

        # a squashed database goes back to a replaced migration: Django reloads the graph
        # without the squash and unapplies the chain's migrations down to it
        paths.migrate(new)
        paths.migrate(new, "0010")
        assert paths.recorded(new) & set(REPLACED) == set(REPLACED[:10])
        assert ("relation", "pqjobs_fair_weight") not in paths.ours(new)  # 0025's table
        # and forward again, through 0011-0025 (the squash is now part applied)
        paths.migrate(new)
        schema = paths.schema(new)
        assert schema == reference.at_last, paths.differences(schema, reference.at_last)

        # all of it applied again, the squash is back in the graph: migrating to zero
        # unapplies 0026 on, then the squash (its down file), and leaves nothing of ours
        paths.migrate(new, "zero")
        assert paths.ours(new) == []
        assert paths.recorded(new) == set()
        # and a fresh start runs the squash again
        paths.migrate(new)
        schema = paths.schema(new)
        assert schema == reference.at_last, paths.differences(schema, reference.at_last)


def test_in_a_schema_of_its_own_the_squash_names_that_schema():
    """Tables go where Django creates them, the first schema of the connection's
    search_path: the squash's file is run for that schema (``current_schema()``, as no
    table of ours exists yet; the chain's files use the schema of pqjobs_job)."""
    with paths.scratch_database() as database:
        with psycopg.connect(**paths.params(database), autocommit=True) as db:  # type: ignore[arg-type]
            db.execute("CREATE SCHEMA jobs")
        paths.migrate(database, paths.SQUASH, search_path="jobs")
        with psycopg.connect(**paths.params(database)) as db:  # type: ignore[arg-type]
            places = db.execute(
                "SELECT n.nspname FROM pg_class c JOIN pg_namespace n "
                "ON n.oid = c.relnamespace WHERE c.relname LIKE 'pqjobs%' "
                "UNION SELECT n.nspname FROM pg_proc p JOIN pg_namespace n "
                "ON n.oid = p.pronamespace WHERE p.proname LIKE 'pqjobs%'"
            ).fetchall()
            assert places == [("jobs",)]
            bodies = db.execute(
                "SELECT count(*) FILTER (WHERE prosrc LIKE '%jobs.pqjobs%'), "
                "count(*) FILTER (WHERE prosrc LIKE '%public.%') "
                "FROM pg_proc WHERE proname LIKE 'pqjobs%'"
            ).fetchone()
            assert bodies == (12, 0), bodies  # (pqjobs_announce_finish() names no table)
