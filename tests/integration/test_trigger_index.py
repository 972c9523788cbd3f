"""``sql/schema/triggers.md`` lists every trigger of the job tables, as the catalog has them.

A trigger added, dropped, renamed or moved to another table or event without the index
following fails here, so the index (and the state diagram drawn from it in
docs/architecture.md) stays the truth about what fires when a job's row changes.
"""

from __future__ import annotations

import pytest
from django.db import connection

from django_pqjobs import sql
from tests.helpers import ROOT

pytestmark = pytest.mark.django_db

# Triggers as the catalog says them, without the copies cloned to partitions (tgparentid):
# tgtype's bits are 1 row, 2 before, 4 insert, 8 delete, 16 update.
_TRIGGERS = """
SELECT t.tgname, c.relname,
       CASE WHEN t.tgtype & 2 = 2 THEN 'BEFORE' ELSE 'AFTER' END || ' ' ||
       CASE WHEN t.tgtype & 4 = 4 THEN 'INSERT'
            WHEN t.tgtype & 8 = 8 THEN 'DELETE'
            WHEN t.tgtype & 16 = 16 THEN 'UPDATE' END,
       CASE WHEN t.tgtype & 1 = 1 THEN 'row' ELSE 'statement' END
       || CASE WHEN t.tgdeferrable THEN ', deferred to commit' ELSE '' END
FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
WHERE NOT t.tgisinternal AND t.tgparentid = 0 AND c.relname LIKE 'pqjobs%%'
  AND c.relnamespace = %(schema)s::regnamespace
"""


def indexed() -> set[tuple[str, str, str, str]]:
    rows = set()
    for line in sql.read("schema/triggers.md").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("pqjobs_"):
            rows.add((cells[0], cells[1], cells[2], cells[3]))
    return rows


def test_the_trigger_index_is_the_catalog() -> None:
    with connection.cursor() as cursor:
        cursor.execute(_TRIGGERS, {"schema": sql.tables_schema(cursor).strip('"')})
        catalog = set(cursor.fetchall())
    assert catalog, "the migrated database has no trigger"
    assert indexed() == catalog


def test_each_indexed_trigger_is_created_in_the_file_it_names() -> None:
    for line in sql.read("schema/triggers.md").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("pqjobs_"):
            text = sql.read(f"schema/{cells[5]}")
            assert f"TRIGGER {cells[0]}\n" in text, cells


def test_the_state_diagram_draws_every_trigger_arrow() -> None:
    architecture = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    for line in sql.read("schema/triggers.md").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("pqjobs_") and "→" in cells[4]:
            assert cells[0] in architecture, f"{cells[0]} is not on the state diagram"
