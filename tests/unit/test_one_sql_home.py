"""The map and the SQL's home: docs/architecture.md names every module and SQL file, and a
SQL statement lives in ``django_pqjobs/sql/`` (``queries/`` under a name, ``schema/`` for
functions), not in a Python string, but in the modules listed here.

A new statement written inline in another module fails here: put it under a ``-- name:``
line of a ``sql/queries/`` file and read it with ``sql.queries(...)``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.helpers import ROOT

PACKAGE = ROOT / "django_pqjobs"

# Modules still allowed to hold SQL statements in Python strings; this list only shrinks.
# The loader itself (sql/). Statements around a name only known at run time or an
# expression the module shares: a setting put back (testing.py), the LISTEN of a channel
# (waiting.py), the advisory lock of a workflow's signals (transitions/workflows.py,
# workflows.py).
ALLOWED = (
    "sql/",
    "testing.py",
    "waiting.py",
    "transitions/workflows.py",
    "workflows.py",
)

# The first words of a statement (written as this package writes SQL: keywords in capitals).
_STATEMENT = re.compile(
    r"^\s*(SELECT\s|INSERT\s+INTO\s|UPDATE\s+\S+\s+SET\s|DELETE\s+FROM\s"
    r"|WITH\s+(RECURSIVE\s+)?\w+\s+AS\b|CREATE\s|DROP\s|ALTER\s|TRUNCATE\s|LOCK\s+TABLE"
    r"|VACUUM\b|ANALYZE\b|LISTEN\s+\S+\s*$|UNLISTEN\s|NOTIFY\s+\w+\s*(,|$)"
    r"|SET\s+(LOCAL\s+)?\w+\s*(=|TO)\s|SHOW\s|CALL\s)",
    re.DOTALL,
)


def _texts(tree: ast.AST) -> list[tuple[int, str]]:
    """Every string of a module, an f-string as one text (its fields as ``x``)."""
    inside = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else "x" for v in node.values]
            found.append((node.lineno, "".join(str(p) for p in parts)))
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in inside
        ):
            found.append((node.lineno, node.value))
    return found


def inline_statements(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [(line, text) for line, text in _texts(tree) if _STATEMENT.match(text)]


def _modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0] != "migrations"
    )


def test_no_sql_statement_outside_sql_and_the_allowed_modules() -> None:
    found = []
    for path in _modules():
        name = path.relative_to(PACKAGE).as_posix()
        if name.startswith(ALLOWED):
            continue
        found += [f"{name}:{line}: {text.strip()[:60]}" for line, text in inline_statements(path)]
    assert not found, "SQL written inline (move it to sql/queries/):\n" + "\n".join(found)


def test_the_detector_sees_a_statement() -> None:
    tree = ast.parse(
        'Q = """\nSELECT id FROM pqjobs_job WHERE shelf = \'hot\'\n"""\n'
        'x = f"DELETE FROM {t} WHERE id = 1"'
    )
    assert [text.split()[0] for _line, text in _texts(tree) if _STATEMENT.match(text)] == [
        "SELECT",
        "DELETE",
    ]
    assert not _STATEMENT.match("NOTIFY on enqueue and LISTEN in workers (False: polling only).")


def test_the_allow_list_names_modules_that_need_it() -> None:
    for entry in ALLOWED:
        paths = [p for p in _modules() if p.relative_to(PACKAGE).as_posix().startswith(entry)]
        assert any(inline_statements(p) for p in paths), f"{entry} holds no SQL: take it off"


def test_architecture_names_every_module_and_sql_file() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = []
    for path in _modules():
        relative = path.relative_to(PACKAGE)
        if path.name != "__init__.py":
            name = path.name
        elif relative.parent == Path("."):
            name = "__init__.py"
        else:
            name = relative.parent.as_posix() + "/"
        if name not in doc:
            missing.append(relative.as_posix())
    for folder in ("schema", "queries"):
        for path in sorted((PACKAGE / "sql" / folder).glob("*.sql")):
            if path.name not in doc:
                missing.append(f"sql/{folder}/{path.name}")
    assert not missing, "docs/architecture.md does not name: " + ", ".join(missing)
