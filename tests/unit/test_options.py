"""The one place that validates job options, and its limits (no database)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone

import pytest

from django_pqjobs import InvalidJobOption, Priority, options
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
    assert options.run_after_or_delay(None, timedelta(minutes=1), "t") == (None, 60.0)
    moment = datetime(2030, 1, 1, tzinfo=UTC)
    assert options.run_after_or_delay(moment, None, "t") == (moment, 0.0)
    with pytest.raises(InvalidJobOption, match="not both"):
        options.run_after_or_delay(moment, 5, "t")
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
