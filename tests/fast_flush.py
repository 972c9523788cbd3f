"""A quicker flush between transactional tests (installed by tests/conftest.py).

After each ``django_db(transaction=True)`` test Django empties every table with one
``TRUNCATE`` and then emits ``post_migrate``, which recreates every content type and
permission. On PostgreSQL a ``TRUNCATE`` gives each table and each of its indexes a new file:
measured here at ~0.28 s a test, about a third of each CI line. A test leaves a few rows
behind, which ``DELETE`` removes in a fraction of that.

So: tables of at most ``SMALL_BYTES`` (their partitions' bytes counted) are emptied with
``DELETE``, larger ones (a test's thousands of jobs, or the dead rows earlier ``DELETE``
left, since nothing vacuums them) are truncated, which also keeps every table near empty for
the planner and the vacuum checks. The deletes run with ``session_replication_role =
replica``, so pqjobs' triggers and foreign-key checks do not fire on rows that are going
anyway. Content types and permissions are kept as migrate made them, which is what the
flush's ``post_migrate`` would recreate, and their cache is cleared, as that
``post_migrate`` clears it. Anything else (``available_apps``, ``serialized_rollback``,
``reset_sequences``, another database vendor, a role that may not set the replication role)
gets Django's own flush.
"""

from __future__ import annotations

from typing import Any

from django.db import DatabaseError, connections, transaction
from django.test import TransactionTestCase

SMALL_BYTES = 8 * 8192  # eight pages
KEPT = frozenset({"django_content_type", "auth_permission"})

_SIZES = """
SELECT c.relname,
       pg_relation_size(c.oid)
       + coalesce((SELECT sum(pg_relation_size(t.relid)) FROM pg_partition_tree(c.oid) t
                   WHERE t.relid <> c.oid), 0) <= %s
FROM pg_class c
WHERE c.relkind IN ('r', 'p') AND c.relname = ANY(%s) AND pg_table_is_visible(c.oid)
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


def empty_tables(alias: str) -> None:
    """Empty every table of the installed models on ``alias`` but the kept ones."""
    from django.contrib.contenttypes.models import ContentType

    connection = connections[alias]
    quote = connection.ops.quote_name
    with transaction.atomic(using=alias), connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(_SIZES, [SMALL_BYTES, _tables_of(alias)])
        sizes = cursor.fetchall()
        statements = [f"DELETE FROM {quote(name)}" for name, small in sizes if small]
        large = [quote(name) for name, small in sizes if not small]
        if large:
            statements.append(f"TRUNCATE {', '.join(large)} CASCADE")
        if statements:
            cursor.execute(";\n".join(statements))
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
