"""JSON and text as PostgreSQL stores them (no database)."""

from __future__ import annotations

import datetime
import decimal
import math
import uuid

import pytest

from django_pqjobs import PayloadError
from django_pqjobs.serialization import (
    MAX_NESTING,
    nests_deeper_than,
    storable_error,
    storable_text,
    to_json,
)


def nested(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def test_django_types_and_unicode_are_stored():
    text = to_json(
        {
            "when": datetime.date(2026, 11, 23),
            "amount": decimal.Decimal("1.10"),
            "id": uuid.UUID(int=1),
            "name": "Zoë ✓",
        },
        "payload",
    )
    assert '"amount":"1.10"' in text and "Zoë ✓" in text


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ({"a": "x\x00y"}, "NUL"),
        ({"a": "\udc80"}, "lone surrogate"),
        ({"a": math.nan}, "not JSON-serialisable"),
        ({"a": object()}, "not JSON-serialisable"),
        (nested(MAX_NESTING + 1), "levels deep"),
        (nested(5000), "nested too deeply"),
    ],
)
def test_what_jsonb_or_the_worker_cannot_hold_is_refused(value, reason):
    with pytest.raises(PayloadError, match=reason):
        to_json(value, "payload for job type 't'")


def test_an_escaped_backslash_before_u0000_is_fine():
    assert to_json({"a": "\\u0000"}, "payload") == '{"a":"\\\\u0000"}'


def test_nesting_limit_counts_structure_not_brackets_in_strings():
    assert to_json(nested(MAX_NESTING), "payload")
    assert not nests_deeper_than('["' + "[" * 500 + '"]', 10)
    assert nests_deeper_than("[" * 11 + "]" * 11, 10)
    assert not nests_deeper_than("[" + "[]," * 500 + "[]]", 10)


def test_size_limit_names_the_setting():
    with pytest.raises(PayloadError, match=r"over the limit of 10 bytes \(SETTING\)"):
        to_json({"a": "0123456789"}, "payload", 10, "SETTING")


def test_storable_text_keeps_what_it_can():
    assert storable_text("a\x00b") == "a\\x00b"
    assert storable_text("a\udc80b") == "a\\udc80b"
    capped = storable_error("x" * 20_000 + "END")
    assert len(capped) == 10 * 1024 and capped.endswith("END") and "cut" in capped
