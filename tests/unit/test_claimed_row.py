"""The claim's output row is declared once: ``pqjobs_claim()``'s RETURNS TABLE names it and
one SELECT fills it, for both of the claim's paths (migration 0039). A second copy of the
columns (a path returning its rows itself again) fails here."""

from __future__ import annotations

import re

from django_pqjobs import sql


def _claim_function(text: str) -> str:
    start = text.index('CREATE OR REPLACE FUNCTION :"schema".pqjobs_claim(')
    return text[start : text.index("$$;", start)]


def test_one_select_fills_the_claimed_row() -> None:
    function = _claim_function(sql.read("schema/claim.sql"))
    # each timestamp column is converted where the row is filled, and only there
    fills = re.findall(r"extract\(epoch FROM cancel_requested_at\)", function)
    assert len(fills) == 1, f"the claimed row is filled in {len(fills)} places"
    declared = re.search(r"RETURNS TABLE \((.*?)\n\)", function, re.S)
    assert declared is not None
    names = re.findall(r"^\s*(\w+) ", declared.group(1), re.M)
    assert names[0] == "id" and names[-2:] == ["row_tid", "blocked_count"]
    assert len(names) == 43


def test_the_function_before_0039_fails_the_check() -> None:
    """The check above sees a second copy: the claim before migration 0039 had two."""
    before = _claim_function(sql.read("migrations/0039_claimed_row_once.down.sql"))
    assert len(re.findall(r"extract\(epoch FROM cancel_requested_at\)", before)) == 2
