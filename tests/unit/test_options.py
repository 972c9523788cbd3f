"""The one place that validates job options, and its limits (no database)."""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import IntEnum
from uuid import UUID

import pytest

from django_pqjobs import InvalidJobOption, Priority, keys, options, specification
from django_pqjobs.models import Job, Schedule


@pytest.mark.parametrize(
    ("validator", "field"),
    [
        (options.job_type_name, Job._meta.get_field("job_type")),
        (options.queue_name, Job._meta.get_field("queue")),
        (options.worker_id, Job._meta.get_field("locked_by")),
        (options.schedule_name, Schedule._meta.get_field("name")),
    ],
)
def test_name_limits_are_the_columns_limits(validator, field):
    assert validator("x" * field.max_length) == "x" * field.max_length
    with pytest.raises(InvalidJobOption, match=f"longer than {field.max_length}"):
        validator("x" * (field.max_length + 1))


def test_dedupe_key_limit_is_the_columns_limit():
    limit = Job._meta.get_field("dedupe_key").max_length
    assert options.dedupe_key("k" * limit) == "k" * limit
    with pytest.raises(InvalidJobOption):
        options.dedupe_key("k" * (limit + 1))


@pytest.mark.parametrize("bad", ["", "   ", "a\x00b", "a\udc80b", "a\nb", "\x1b[31m", 7, None])
def test_names_refuse_what_cannot_be_stored_or_shown(bad):
    with pytest.raises(InvalidJobOption):
        options.queue_name(bad)


@pytest.mark.parametrize("bad", ["", "a\x00b", "a\ud800", 5])
def test_dedupe_keys_refuse_what_cannot_be_stored(bad):
    with pytest.raises(InvalidJobOption):
        options.dedupe_key(bad)


def test_dedupe_keys_may_hold_any_storable_text():
    assert options.dedupe_key("user@example.com\tmonday") == "user@example.com\tmonday"


@pytest.mark.parametrize("value", [-(2**31) + 1, 0, 2**31 - 1])
def test_priorities_within_32_bits(value):
    assert options.priority(value) == value


@pytest.mark.parametrize("bad", [-(2**31), 2**31, True, 1.5, "1"])
def test_priorities_outside_or_not_whole(bad):
    with pytest.raises(InvalidJobOption):
        options.priority(bad)


def test_named_priorities_are_ordered_integers_around_the_default():
    assert [int(p) for p in Priority] == [-50, 0, 50, 100]
    assert Priority.LOW < Priority.NORMAL < Priority.HIGH < Priority.CRITICAL
    assert Job._meta.get_field("priority").default == Priority.NORMAL  # the default


@pytest.mark.parametrize(
    "given, value",
    [
        (Priority.HIGH, 50),
        ("high", 50),
        ("HIGH", 50),
        (" Critical ", 100),
        ("Priority.LOW", -50),
        ("normal", 0),
        (75, 75),
    ],
)
def test_a_priority_is_a_number_a_priority_or_its_name(given, value):
    result = options.priority(given)
    assert result == value and type(result) is int


@pytest.mark.parametrize("bad", ["urgent", "", "50", "high!", None])
def test_unknown_priority_names_are_refused_listing_the_names(bad):
    with pytest.raises(InvalidJobOption, match=r"a Priority \(LOW, NORMAL, HIGH, CRITICAL\)"):
        options.priority(bad, "priority")


@pytest.mark.parametrize("bad", [0, -1, 2**31, True])
def test_max_attempts(bad):
    with pytest.raises(InvalidJobOption):
        options.max_attempts(bad)


@pytest.mark.parametrize("bad", [0, -1, math.nan, math.inf, 1e300, timedelta(days=365 * 101)])
def test_timeouts_are_positive_finite_and_bounded(bad):
    with pytest.raises(InvalidJobOption):
        options.timeout(bad)


def test_delays_and_run_after():
    assert specification.declare("call", "t", {"delay": timedelta(minutes=1)}) == {"delay": 60.0}
    moment = datetime(2030, 1, 1, tzinfo=UTC)
    assert specification.declare("call", "t", {"run_after": moment}) == {"run_after": moment}
    with pytest.raises(InvalidJobOption, match="not both"):
        specification.check_rules(
            specification.declare("call", "t", {"run_after": moment, "delay": 5}), "t"
        )
    with pytest.raises(InvalidJobOption, match="timezone-aware"):
        options.run_after(datetime(2030, 1, 1))
    # a run time that leaves the calendar in UTC (year 1 at +05:00 is year 0 in UTC)
    with pytest.raises(InvalidJobOption, match="years 1 and 9999"):
        options.run_after(datetime(1, 1, 1, 1, tzinfo=timezone(timedelta(hours=5))))
    with pytest.raises(InvalidJobOption, match="years 1 and 9999"):
        options.run_after(datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))))
    with pytest.raises(InvalidJobOption):
        options.delay(1e300)


def test_enumerations():
    assert options.dedupe("replace") == "replace"
    assert options.isolation("process") == "process"
    with pytest.raises(InvalidJobOption, match="dedupe"):
        options.dedupe("merge")
    with pytest.raises(InvalidJobOption, match="isolation"):
        options.isolation("vm")


def test_memory_limits():
    assert options.memory_limit("512M") == 512 * 1024**2
    assert options.memory_limit("2GiB") == 2 * 1024**3
    with pytest.raises(InvalidJobOption):
        options.memory_limit("1M")


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 10**400, "1", None, True])
def test_finite_numbers(bad):
    with pytest.raises(InvalidJobOption):
        options.finite_number(bad, "done")


# --- flow keys -------------------------------------------------------------------------------


def key(value, template="k:{v}"):
    return keys.derive_key(template, {"v": value}, "job type 'x' concurrency_key")


class Tier(IntEnum):
    GOLD = 1


class Measured(float):
    def __repr__(self) -> str:
        return f"Measured({float(self)})"


@pytest.mark.parametrize(
    "value",
    [1, 1.0, Measured(1.0), Decimal("1.00"), Decimal("0.1E1"), Tier.GOLD,
     "1", "01", " 1", "+1", "1.", "1.0", "\u00a01\u2003", "\u0661", "\uff11"],
)  # fmt: skip
def test_values_that_mean_1_give_one_key(value):
    assert key(value) == "k:1"


@pytest.mark.parametrize(
    ("value", "written"),
    [
        (0, "0"),
        (-0.0, "0"),
        ("-0", "0"),
        (-7, "-7"),
        ("-007", "-7"),
        (0.1, "0.1"),  # the shortest text that reads back as the float
        (1e-7, "0.0000001"),  # never an exponent
        (1e22, "1" + "0" * 22),
        (Decimal("1.5E+1"), "15"),
        (Decimal("-12.3400"), "-12.34"),
        ("1.50", "1.5"),
        (".5", "0.5"),
        (0.5, "0.5"),
        ("1_000", "1000"),  # as int() reads it
        (2**70, str(2**70)),
        (10**252, "1" + "0" * 252),  # with "k:", as long as a key may be
        # exact, not rounded to the decimal context's 28 digits
        (Decimal("1.0000000000000000000000000000001"), "1.0000000000000000000000000000001"),
    ],
)
def test_numbers_are_written_in_one_plain_decimal_form(value, written):
    assert key(value) == f"k:{written}"


def test_text_is_normalised_and_escaped():
    assert key("e\u0301") == key("\u00e9") == "k:%C3%A9"  # NFC, then UTF-8 percent-encoded
    assert key("  acme  ") == key("acme") == "k:acme"
    assert key("a-b_c.D9") == "k:a-b_c.D9"  # left as they are
    assert key("a:b") == "k:a%3Ab"
    assert key("50%") == "k:50%25"
    assert key("a b/c~") == "k:a%20b%2Fc%7E"
    assert key("1e3") == "k:1e3"  # not a number: no exponents
    assert key("") == "k:"


def test_uuids_and_dates_have_one_form():
    value = UUID("0b8c1a2e-3d4f-4a5b-9c6d-7e8f90a1b2c3")
    forms = [
        value,
        str(value),
        str(value).upper(),
        f"{{{value}}}",
        f"urn:uuid:{value}",
        value.hex,
        f" {value.hex.upper()} ",
    ]
    assert {key(form) for form in forms} == {f"k:{value}"}
    assert key(date(2024, 1, 2)) == key("2024-01-02") == "k:2024-01-02"


# Values of fields that sit beside a separator: escaping keeps every split apart.
_TRICKY = ["a", "b", "c", "a:b", "b:c", ":", "::", "%", "%3A", "a%3Ab", "/", "a/b", " ", "", "é"]


@pytest.mark.parametrize("template", ["t:{t}:u:{u}", "{t}/{u}", "{t}:%{u}", "{t} {u}"])
def test_different_values_never_share_a_key(template):
    seen: dict[str, tuple[str, str]] = {}
    for t in _TRICKY:
        for u in _TRICKY:
            made = keys.derive_key(template, {"t": t, "u": u}, "k")
            assert made is not None
            meant = (t.strip(), u.strip())
            assert seen.setdefault(made, meant) == meant, (template, made)


def test_tenant_a_b_and_user_c_is_not_tenant_a_and_user_b_c():
    template = "tenant:{tenant}:user:{user}"
    first = keys.derive_key(template, {"tenant": "a:b", "user": "c"}, "k")
    second = keys.derive_key(template, {"tenant": "a", "user": "b:c"}, "k")
    assert (first, second) == ("tenant:a%3Ab:user:c", "tenant:a:user:b%3Ac")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, r"is a bool \(True\); .*because True == 1 and False == 0"),
        (False, r"is a bool \(False\)"),
        (None, "is None"),
        (math.nan, r"is a float that is not a finite number \(nan\)"),
        (-math.inf, "is a float that is not a finite number"),
        (Decimal("NaN"), "is a Decimal that is not a finite number"),
        (Decimal("sNaN"), "is a Decimal that is not a finite number"),
        (Decimal("Infinity"), "is a Decimal that is not a finite number"),
        ([1], "is of type list"),
        ({"id": 1}, "is of type dict"),
        (b"1", "is of type bytes"),
        (datetime(2024, 1, 2, tzinfo=UTC), "is a datetime; format the part of it"),
        (timedelta(1), "is a timedelta"),
        ("x" * 256, r"is longer than a key \(255 characters\)"),
        (10**255, "is an int too long"),
        (10**3000, "is an int too long"),
        (Decimal("1E+255"), "is a number too long"),
        (Decimal("1E+100000"), "is a number too long"),
        (1e-300, "is a number too long"),
        ("a\udc80", "lone surrogate"),
    ],
)
def test_values_a_key_cannot_hold_are_refused_naming_the_field_and_type(value, message):
    named = re.escape("job type 'x' concurrency_key 'k:{v}': the payload field 'v' ")
    with pytest.raises(InvalidJobOption, match=f"^{named}") as caught:
        key(value)
    assert re.search(message, str(caught.value)), str(caught.value)


@pytest.mark.parametrize(
    "char", ["\x00", "\t", "\n", "\x1b", "\x1f", "\x7f", "\x80", "\x85", "\x9f"]
)
def test_control_characters_are_refused_anywhere_in_a_value(char):
    for value in (char, f"acme{char}", f"{char}1", f"1{char}"):
        with pytest.raises(
            InvalidJobOption,
            match=rf"the payload field 'v' holds a control character \(U\+{ord(char):04X}\)",
        ):
            key(value)


def test_a_key_function_answers_for_its_own_form_but_not_for_control_characters():
    assert keys.derive_key(lambda p: f" {p['v']} ", {"v": "01"}, "k") == " 01 "  # as given
    assert keys.derive_key(lambda p: None, {}, "k") is None
    with pytest.raises(
        InvalidJobOption, match=r"^k must not contain control characters \(U\+0085\)"
    ):
        keys.derive_key(lambda p: "a\x85b", {}, "k")
    with pytest.raises(InvalidJobOption, match="NUL"):
        keys.derive_key(lambda p: "a\x00b", {}, "k")
    with pytest.raises(InvalidJobOption, match=r"must not contain control characters \(U\+000A\)"):
        keys.flow_key("given\n", "k")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("{a}{b}", "'{a}' and '{b}' are next to each other"),
        ("x:{a}{b}:y", "next to each other"),
        ("{a}-{b}", "separated by '-' only"),
        ("{a}.{b}", "separated by '.' only"),
        ("{a}_x_{b}", "separated by '_x_' only"),
        ("{a}%{b}", "separated by '%' only"),
        ("{a!r}", "conversion or format spec"),
        ("{a:03}", "conversion or format spec"),
        ("{}", "must name a payload field"),
        ("{0}", "must name a payload field"),
        ("{a[0]}", "must name a payload field"),
        ("{a.b}", "must name a payload field"),
        ("x\t{a}", "control characters"),
        ("{a", "not a valid format string"),
    ],
)
def test_templates_that_could_not_keep_keys_apart_are_refused(template, message):
    with pytest.raises(InvalidJobOption, match=re.escape(message)):
        keys.key_template(template, "@job('x') concurrency_key")


@pytest.mark.parametrize(
    "template", ["{a}:{b}", "{a}/{b}", "{a} {b}", "{a}-x:{b}", "{a}:{a}", "tenant:{a}", "fixed"]
)
def test_templates_with_a_separator_between_fields_are_accepted(template):
    assert keys.key_template(template, "t") == template
