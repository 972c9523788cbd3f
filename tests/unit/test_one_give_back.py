"""An attempt is given back uncharged (one more attempt allowed, its number never reused) by
one statement: an operator's release and a worker's release of attempts it is not running
each held a copy of it (issue 40, leftovers)."""

from __future__ import annotations

from pathlib import Path

from django_pqjobs import sql

MODULES = sorted(path.stem for path in (Path(sql.__file__).parent / "queries").glob("*.sql"))


def test_an_attempt_is_given_back_uncharged_by_one_statement():
    uncharged = [
        f"{module}:{name}"
        for module in MODULES
        for name, text in sql.queries(module).items()
        if "max_attempts::bigint + 1" in text
    ]
    assert uncharged == ["attempts:give_back"]
