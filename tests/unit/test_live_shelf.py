"""One live shelf: a statement about live jobs says so in the one way, ``shelf = 'hot'`` on
each reference to ``pqjobs_job`` or ``pqjobs_attempt`` (partition pruning plans the hot
partition alone), and a statement deliberately about every shelf (a job by its id, wherever
it is; history) carries the marker ``-- all shelves:`` and a reason.

Why not name ``pqjobs_job_hot`` itself: the statement triggers that keep batches and
dependencies (``pqjobs_job_composed_status``, ``pqjobs_job_composed_deleted``) are the
parent's, and PostgreSQL fires a parent's statement triggers only for statements naming the
parent; a write to the partition would skip them.

Every statement of ``sql/schema/``, ``sql/queries/`` and the inline SQL left in Python is
read; a reference with neither the predicate nor the marker fails here.
"""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT
from tests.unit.test_one_sql_home import PACKAGE, _modules, inline_statements

MARKER = "-- all shelves"
# "-- all shelves: why" (every reference of the statement), or "-- all shelves (e, p): why"
# (those aliases only: the statement's other references say the live shelf)
_MARKS = re.compile(r"-- all shelves(?: \(([\w, ]+)\))?: *([^\n]*)")
_TABLE = r"(?:(?::\"schema\"|pqjobs)\.)?(pqjobs_job|pqjobs_attempt)(?![\w$])"
_REFERENCE = re.compile(
    r"(?:\b(?:FROM|JOIN|UPDATE|USING)\s+(?:ONLY\s+)?|,\s*)" + _TABLE + r"(?:\s+(?:AS\s+)?(\w+))?",
    re.IGNORECASE,
)
_NOT_ALIAS = {
    "where", "set", "on", "join", "left", "right", "inner", "cross", "full", "group", "order",
    "limit", "for", "returning", "using", "union", "except", "intersect", "having", "window",
    "offset", "into", "values", "select", "and", "or", "then", "else", "end", "as", "natural",
    "tablesample", "fetch",
}  # fmt: skip
_COMMENT = re.compile(r"--[^\n]*")


def _keep_marker(match: re.Match[str]) -> str:
    return match.group(0) if _MARKS.match(match.group(0)) else ""


def _units() -> list[tuple[str, str]]:
    """(where, text) for every statement: a ``;``-separated piece of a schema/ file (a
    function's body splits into its statements), a named statement of queries/, an inline
    statement of Python."""
    found: list[tuple[str, str]] = []
    for path in sorted((PACKAGE / "sql" / "schema").glob("*.sql")):
        # (comments may hold a ';': each goes but for its marker)
        text = _COMMENT.sub(_keep_marker, path.read_text(encoding="utf-8"))
        line = 1
        for piece in text.split(";"):
            found.append((f"sql/schema/{path.name}:{line}", piece))
            line += piece.count("\n")
    for path in sorted((PACKAGE / "sql" / "queries").glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        parts = re.split(r"^-- name: *(\S+) *$", text, flags=re.MULTILINE)
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            found.append((f"sql/queries/{path.name} {name}", body))
    for path in _modules():
        name = path.relative_to(PACKAGE).as_posix()
        found += [(f"{name}:{line}", text) for line, text in inline_statements(path)]
    return found


def unmarked(text: str) -> list[str]:
    """The references of a statement to the job or attempt table that say neither the live
    shelf nor the marker (a statement with the marker is about every shelf)."""
    exempt: set[str] = set()
    for aliases, _reason in _MARKS.findall(text):
        if not aliases:
            return []
        exempt.update(a.strip() for a in aliases.split(","))
    code = _COMMENT.sub("", text)
    missing = []
    for match in _REFERENCE.finditer(code):
        table, alias = match.group(1), match.group(2)
        if alias is None or alias.lower() in _NOT_ALIAS:
            alias = table
        if alias in exempt:
            continue
        qualified = rf"\b{re.escape(alias)}\.shelf\s*=\s*'hot'"
        bare = r"(?<![\w.])shelf\s*=\s*'hot'"
        if re.search(qualified, code) or (alias == table and re.search(bare, code)):
            continue
        missing.append(f"{table} {alias}")
    return missing


def marked(units: list[tuple[str, str]]) -> list[str]:
    """``file: reason`` of every marker (no line number: the list must not move with edits)."""
    found = []
    for where, text in units:
        file = re.split(r"[: ]", where)[0]
        for aliases, reason in _MARKS.findall(text):
            found.append(f"{file}: {f'({aliases}) ' if aliases else ''}{reason.strip()}")
    return found


def test_every_statement_about_jobs_names_the_live_shelf_or_says_all_shelves() -> None:
    bad = []
    for where, text in _units():
        for reference in unmarked(text):
            bad.append(f"{where}: {reference}")
    assert not bad, (
        "statements reading pqjobs_job/pqjobs_attempt without shelf = 'hot' (live jobs) "
        f"or the marker '{MARKER}: why' (every shelf, on purpose):\n" + "\n".join(bad)
    )


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) FROM pqjobs_job WHERE status = 'ready'",
        "SELECT 1 FROM pqjobs_job j JOIN pqjobs_attempt a ON a.job_id = j.id WHERE j.shelf = 'hot'",
        "UPDATE :\"schema\".pqjobs_job AS j SET status = 'ready' WHERE j.id = 1",
        "SELECT 1 FROM pqjobs_dependency d JOIN pqjobs_job w ON w.id = d.job_id "
        "WHERE w.status = 'waiting' -- shelf = 'hot' in a comment does not count",
        "-- all shelves (e): the prerequisite\nSELECT 1 FROM pqjobs_dependency d "
        "JOIN pqjobs_job w ON w.id = d.job_id JOIN pqjobs_job e ON e.id = d.depends_on_id",
    ],
)
def test_a_statement_about_jobs_without_the_shelf_is_refused(statement: str) -> None:
    assert unmarked(statement)


@pytest.mark.parametrize(
    "statement",
    [
        "SELECT count(*) FROM pqjobs_job WHERE shelf = 'hot' AND status = 'ready'",
        "SELECT 1 FROM pqjobs_job j JOIN pqjobs_attempt a ON a.job_id = j.id "
        "WHERE j.shelf = 'hot' AND a.shelf = 'hot'",
        "-- all shelves: a job by its id\nSELECT * FROM pqjobs_job WHERE id = %s",
        "-- all shelves (e): the prerequisite\nSELECT 1 FROM pqjobs_dependency d "
        "JOIN pqjobs_job w ON w.id = d.job_id JOIN pqjobs_job e ON e.id = d.depends_on_id "
        "WHERE w.shelf = 'hot'",
        "SELECT 1 FROM pqjobs_job_hot WHERE status = 'ready'",
        "INSERT INTO pqjobs_job (job_type) VALUES ('x')",
    ],
)
def test_a_statement_that_says_its_shelf_passes(statement: str) -> None:
    assert not unmarked(statement)


def test_the_marked_statements_are_listed() -> None:
    """The statements about every shelf, counted and listed: a new one is a decision to be
    seen in review (tests/unit/all_shelves.txt, one ``file: reason`` a line)."""
    found = marked(_units())
    listed = [
        line
        for line in (ROOT / "tests" / "unit" / "all_shelves.txt").read_text("utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert sorted(found) == sorted(listed), "update tests/unit/all_shelves.txt: " + repr(
        sorted(set(found) ^ set(listed))
    )
    assert len(found) == 34
