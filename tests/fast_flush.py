"""A quicker flush between transactional tests (installed by tests/conftest.py).

After each ``django_db(transaction=True)`` test Django empties every table with one
``TRUNCATE`` and then emits ``post_migrate``, which recreates every content type and
permission. On PostgreSQL a ``TRUNCATE`` gives each table and each of its indexes a new file:
measured here at ~0.28 s a test, about a third of each CI line. A test leaves a few rows
behind, which ``DELETE`` removes in a fraction of that.

So: tables (each partition on its own) of at most ``SMALL_BYTES`` are emptied with
``DELETE``, larger ones (a test's thousands of jobs, or the dead rows earlier ``DELETE``
left, since nothing vacuums them) are truncated, which also keeps every table near empty for
the planner and the vacuum checks. Each table, and each partition of a partitioned one, is
emptied in a transaction of its own, so that a flush holds few locks at a time (see
:func:`empty_tables`). The deletes run with ``session_replication_role = replica``, so
pqjobs' triggers and foreign-key checks do not fire on rows that are going anyway. Content
types and permissions are kept as migrate made them, which is what the flush's
``post_migrate`` would recreate, and their cache is cleared, as that
``post_migrate`` clears it. Anything else (``available_apps``, ``serialized_rollback``,
``reset_sequences``, another database vendor, a role that may not set the replication role)
gets Django's own flush.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connections
from django.test import TransactionTestCase

SMALL_BYTES = 8 * 8192  # eight pages
KEPT = frozenset({"django_content_type", "auth_permission"})

# Each leaf table (a partition of a partitioned table, or the table itself) and whether it
# is small. pg_relation_size() releases its lock at once: this locks nothing for long.
_LEAVES = """
SELECT leaf.oid::regclass::text, pg_relation_size(leaf.oid) <= %s
FROM pg_class c
CROSS JOIN LATERAL (
    SELECT t.relid FROM pg_partition_tree(c.oid) t WHERE t.isleaf
    UNION ALL
    SELECT c.oid WHERE c.relkind = 'r'
) AS leaf (oid)
WHERE c.relkind IN ('r', 'p') AND c.relname = ANY(%s) AND pg_table_is_visible(c.oid)
ORDER BY 1
"""

# (private to Django, hence getattr and setattr)
_django_teardown = getattr(TransactionTestCase, "_fixture_teardown")  # noqa: B009
_tables: dict[str, list[str]] = {}


def _tables_of(alias: str) -> list[str]:
    if alias not in _tables:
        introspection = connections[alias].introspection
        names = introspection.django_table_names(only_existing=True, include_views=False)
        _tables[alias] = sorted(set(names) - KEPT)
    return _tables[alias]


def flush_statements(alias: str) -> list[str]:
    """One statement per leaf table (each partition apart): ``DELETE`` for a small one,
    ``TRUNCATE`` for a large one."""
    with connections[alias].cursor() as cursor:
        cursor.execute(_LEAVES, [SMALL_BYTES, _tables_of(alias)])
        leaves = cursor.fetchall()
    return [
        f"DELETE FROM {name}" if small else f"TRUNCATE {name} CASCADE" for name, small in leaves
    ]


def empty_tables(alias: str) -> None:
    """Empty every table of the installed models on ``alias`` but the kept ones.

    Each leaf table is emptied in a transaction of its own, which locks that table and its
    indexes alone (a few dozen locks at most): one transaction for them all locked every
    table, partition and index at once, 500 and more of the server's shared lock table
    (``max_locks_per_transaction``) with the history partitions of a test, which made
    another test run on the same server fail with "out of shared memory"."""
    from django.contrib.contenttypes.models import ContentType

    connection = connections[alias]
    statements = flush_statements(alias)
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")
        try:
            for statement in statements:
                cursor.execute(statement)  # autocommit: a transaction each
        finally:
            cursor.execute("RESET session_replication_role")
    ContentType.objects.clear_cache()


def _fixture_teardown(self: Any) -> None:
    aliases = self._databases_names(include_mirrors=False)
    if (
        self.available_apps is not None
        or self.serialized_rollback
        or self.reset_sequences
        or any(connections[alias].vendor != "postgresql" for alias in aliases)
    ):
        _django_teardown(self)
        return
    for alias in aliases:
        try:
            empty_tables(alias)
        except DatabaseError:
            _django_teardown(self)
            return


def install() -> None:
    """Use :func:`empty_tables` after every transactional test of this run."""
    setattr(TransactionTestCase, "_fixture_teardown", _fixture_teardown)  # noqa: B010
