"""Schedules without a database: validation, next-run computation, DST, declarations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from django.test import override_settings

from django_pqjobs import InvalidJobOption, job
from django_pqjobs.conf import Settings, conf
from django_pqjobs.recurrence import (
    ScheduleError,
    Timing,
    build_spec,
    resolve_wall_time,
    specs_from_setting,
    validate_cron,
    validate_timezone,
)
from django_pqjobs.registry import registry
from tests.helpers import check_ids

BERLIN = ZoneInfo("Europe/Berlin")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# --- validation -------------------------------------------------------------------------


@pytest.mark.parametrize("expression", ["0 3 * * *", "*/5 * * * 1-5", "* * * * * *", "@daily"])
def test_valid_cron_expressions(expression):
    assert validate_cron(f"  {expression} ") == expression


@pytest.mark.parametrize(
    "expression, message",
    [
        ("61 * * * *", "is not valid"),
        ("* * *", "has 3 fields; use 5"),
        ("* * * * * * *", "has 7 fields"),
        ("0 0 31 2 *", "never matches a real date"),
        ("@reboot", "known aliases"),
        ("banana", "has 1 fields"),
        ("", "non-empty string"),
    ],
)
def test_invalid_cron_expressions_say_why(expression, message):
    with pytest.raises(ScheduleError, match=message):
        validate_cron(expression)


def test_timezone_must_be_an_iana_name():
    assert validate_timezone("Europe/Berlin") == "Europe/Berlin"
    for bad in ("Mars/Olympus", "", "CEST+2", None):
        with pytest.raises(ScheduleError, match="timezone"):
            validate_timezone(bad)


def test_exactly_one_of_cron_and_interval():
    with pytest.raises(ScheduleError, match="not both"):
        Timing.build("* * * * *", 60)
    with pytest.raises(ScheduleError, match="either cron"):
        Timing.build(None, None)
    with pytest.raises(ScheduleError, match="more than zero"):
        Timing.build(None, 0)
    assert Timing.build(None, timedelta(minutes=5)).interval == 300.0
    assert Timing.build(None, 2).interval == 2.0


# --- next runs --------------------------------------------------------------------------


def test_cron_next_is_strictly_after_and_in_utc():
    timing = Timing.build("0 3 * * *", timezone="UTC")
    assert timing.next_after(utc(2026, 5, 1, 2, 59)) == utc(2026, 5, 1, 3)
    assert timing.next_after(utc(2026, 5, 1, 3)) == utc(2026, 5, 2, 3)
    assert timing.next_after(utc(2026, 5, 1, 3)).tzinfo == UTC


def test_six_fields_are_seconds_last():
    timing = Timing.build("* * * * * */10")
    start = datetime(2026, 5, 1, 12, 0, 3, 500_000, tzinfo=UTC)
    assert timing.upcoming(start, 3) == [
        utc(2026, 5, 1, 12, 0, 10),
        utc(2026, 5, 1, 12, 0, 20),
        utc(2026, 5, 1, 12, 0, 30),
    ]


def test_cron_fields_are_read_in_the_schedule_timezone():
    timing = Timing.build("0 9 * * *", timezone="America/New_York")
    assert timing.next_after(utc(2026, 1, 10)) == utc(2026, 1, 10, 14)  # EST = UTC-5
    assert timing.next_after(utc(2026, 7, 10)) == utc(2026, 7, 10, 13)  # EDT = UTC-4


def test_interval_runs_on_the_grid_of_the_previous_tick_without_drift():
    timing = Timing.build(None, 60)
    tick = utc(2026, 5, 1, 12, 0, 0)
    # enqueued 7 s late: the next run is still one interval after the *tick*
    assert timing.next_after(tick, anchor=tick) == utc(2026, 5, 1, 12, 1)
    # after a long outage: the first grid point after now, not now + interval
    now = utc(2026, 5, 1, 13, 0, 30)
    assert timing.next_after(now, anchor=tick) == utc(2026, 5, 1, 13, 1)
    assert timing.next_after(now) == now + timedelta(seconds=60)  # no anchor: from now


def test_naive_datetimes_are_refused():
    with pytest.raises(ValueError, match="timezone-aware"):
        Timing.build("* * * * *").next_after(datetime(2026, 1, 1))


# --- DST (Europe/Berlin: 2026-03-29 02:00 -> 03:00, 2026-10-25 03:00 -> 02:00) ----------


def test_dst_spring_forward_missing_0230_runs_once_when_the_clocks_jump():
    timing = Timing.build("30 2 * * *", timezone="Europe/Berlin")
    runs = timing.upcoming(utc(2026, 3, 27), 4)
    local = [r.astimezone(BERLIN).strftime("%m-%d %H:%M %Z") for r in runs]
    assert local == ["03-27 02:30 CET", "03-28 02:30 CET", "03-29 03:00 CEST", "03-30 02:30 CEST"]


def test_dst_fall_back_repeated_0230_runs_once_at_its_first_occurrence():
    timing = Timing.build("30 2 * * *", timezone="Europe/Berlin")
    runs = timing.upcoming(utc(2026, 10, 23), 4)
    local = [r.astimezone(BERLIN).strftime("%m-%d %H:%M %Z") for r in runs]
    assert local == ["10-23 02:30 CEST", "10-24 02:30 CEST", "10-25 02:30 CEST", "10-26 02:30 CET"]
    # Asked from inside the repeated hour (02:10 CET, after the first 02:30 CEST ran):
    # the second 02:30 does not run again.
    assert timing.next_after(utc(2026, 10, 25, 1, 10)) == utc(2026, 10, 26, 1, 30)


def test_dst_frequent_expression_stays_monotonic_across_both_transitions():
    timing = Timing.build("*/20 * * * *", timezone="Europe/Berlin")
    spring = timing.upcoming(utc(2026, 3, 29, 0, 30), 4)
    assert spring == [
        utc(2026, 3, 29, 0, 40),  # 01:40 CET
        utc(2026, 3, 29, 1, 0),  # 02:00-02:40 do not exist: one run at the jump (03:00 CEST)
        utc(2026, 3, 29, 1, 20),
        utc(2026, 3, 29, 1, 40),
    ]
    autumn = timing.upcoming(utc(2026, 10, 24, 23, 50), 4)
    # 02:00, 02:20, 02:40 run once (the CEST pass); the repeated CET hour does not re-run
    # them, so the next run is 03:00 CET: one hour without runs, as documented.
    assert autumn == [
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 0, 20),
        utc(2026, 10, 25, 0, 40),
        utc(2026, 10, 25, 2, 0),
    ]


def test_resolve_wall_time():
    assert resolve_wall_time(datetime(2026, 3, 29, 2, 30), BERLIN) == utc(2026, 3, 29, 1)
    assert resolve_wall_time(datetime(2026, 10, 25, 2, 30), BERLIN) == utc(2026, 10, 25, 0, 30)
    assert resolve_wall_time(datetime(2026, 6, 1, 12, 0), BERLIN) == utc(2026, 6, 1, 10)


def test_interval_schedules_ignore_dst():
    timing = Timing.build(None, 3600, "Europe/Berlin")
    start = utc(2026, 10, 24, 23, 0)
    runs = timing.upcoming(start, 4, anchor=start)
    assert [(b - a).total_seconds() for a, b in zip([start, *runs], runs, strict=False)] == [
        3600
    ] * 4


# --- declarations -----------------------------------------------------------------------


def test_job_decorator_declares_a_schedule_named_after_the_job_type():
    @job(
        "tests.unit.nightly", cron="0 3 * * *", timezone="Europe/Berlin", schedule_payload={"a": 1}
    )
    def nightly(ctx):
        return None

    try:
        spec = registry.get("tests.unit.nightly").schedule
        assert spec is not None
        assert (spec.name, spec.job_type, spec.payload) == ("tests.unit.nightly",) * 2 + ({"a": 1},)
        assert spec.timing == Timing("0 3 * * *", None, "Europe/Berlin")
        assert (spec.overlap, spec.misfire, spec.enabled) == ("skip", "run_once", True)
    finally:
        registry.unregister("tests.unit.nightly")


@pytest.mark.parametrize(
    "options, message",
    [
        ({"cron": "0 3 * *"}, "has 4 fields"),
        ({"cron": "99 3 * * *"}, "is not valid"),
        ({"cron": "0 3 * * *", "timezone": "Europe/Atlantis"}, "not a known IANA"),
        ({"cron": "0 3 * * *", "interval": 60}, "not both"),
        ({"interval": -1}, "more than zero"),
        ({"timezone": "Europe/Berlin"}, "need cron= or interval="),
        ({"schedule_payload": {"a": 1}}, "need cron= or interval="),
        ({"cron": "0 3 * * *", "overlap": "queue"}, "overlap must be one of"),
        ({"cron": "0 3 * * *", "misfire": "catch_up"}, "misfire must be one of"),
        ({"cron": "0 3 * * *", "schedule_payload": {"x": object()}}, "not JSON"),
    ],
)
def test_job_decorator_refuses_bad_schedules(options, message):
    with pytest.raises(InvalidJobOption, match=message):
        job("tests.unit.bad", **options)
    assert "tests.unit.bad" not in registry


def test_settings_schedules_are_validated_fully():
    specs = specs_from_setting(
        [
            {"name": "a", "job_type": "x", "cron": "0 * * * *", "payload": {"k": 1}},
            {"name": "b", "job_type": "x", "interval": timedelta(minutes=1), "queue": "q"},
        ],
        "PQJOBS['SCHEDULES']",
    )
    assert [s.name for s in specs] == ["a", "b"]
    assert specs[1].timing.interval == 60 and specs[1].queue == "q"
    bad = [
        ({"name": "a", "job_type": "x"}, "either cron"),
        ({"name": "a", "job_type": "x", "cron": "* *"}, "has 2 fields"),
        ({"name": "a", "job_type": "x", "cron": "* * * * *", "timezone": "Nope"}, "timezone"),
        ({"name": "a", "job_type": "x", "cron": "* * * * *", "interval": 5}, "not both"),
        ({"name": "a", "job_type": "x", "cron": "* * * * *", "when": 1}, "unknown keys"),
        ({"job_type": "x", "cron": "* * * * *"}, "needs 'name'"),
        ({"name": "a", "job_type": "x", "cron": "* * * * *", "priority": "urgent"}, "priority"),
    ]
    for item, message in bad:
        with pytest.raises(ScheduleError, match=message):
            specs_from_setting([item], "PQJOBS['SCHEDULES']")
    with pytest.raises(ScheduleError, match="used twice"):
        specs_from_setting([{"name": "a", "job_type": "x", "interval": 1}] * 2, "S")
    with pytest.raises(ScheduleError, match="list of dicts"):
        specs_from_setting({"name": "a"}, "S")


def test_declared_snapshot_uses_model_field_names():
    spec = build_spec("n", "t", interval=30, queue="q", priority=3)
    assert spec.declared() == {
        "job_type": "t",
        "payload": {},
        "queue": "q",
        "priority": 3,
        "cron": "",
        "interval_seconds": 30.0,
        "timezone": "UTC",
        "overlap": "skip",
        "misfire": "run_once",
        "enabled": True,
    }


@pytest.mark.parametrize(
    "value",
    [
        [{"name": "a", "job_type": "tests.noop", "cron": "0 25 * * *"}],
        [{"name": "a", "job_type": "tests.noop", "cron": "0 2 * * *", "timezone": "Mars/Base"}],
        [{"name": "a", "job_type": "tests.noop", "cron": "0 2 * * *", "interval": 60}],
        [{"name": "a", "job_type": "tests.noop"}],
        "nightly",
    ],
)
def test_invalid_schedules_setting_fails_the_system_check(value):
    assert Settings.SCHEDULES.check_id == "pqjobs.E040"
    assert "pqjobs.E040" in check_ids(SCHEDULES=value)


def test_schedule_settings_checks():
    good = [{"name": "a", "job_type": "tests.noop", "cron": "0 2 * * *"}]
    assert check_ids(SCHEDULES=good) == set()
    assert "pqjobs.W040" in check_ids(SCHEDULES=[{**good[0], "job_type": "nobody.handles"}])
    assert "pqjobs.E041" in check_ids(SCHEDULER_INTERVAL=0)
    assert "pqjobs.E042" in check_ids(SCHEDULE_MISFIRE_GRACE=-1)
    with override_settings(PQJOBS={"SCHEDULER_INTERVAL": None}):
        assert conf.SCHEDULER_INTERVAL is None


def test_a_name_declared_in_code_and_in_settings_is_an_error():
    @job("tests.unit.twice", interval=60)
    def twice(ctx):
        return None

    try:
        ids = check_ids(
            SCHEDULES=[{"name": "tests.unit.twice", "job_type": "tests.noop", "interval": 5}]
        )
        assert "pqjobs.E043" in ids
    finally:
        registry.unregister("tests.unit.twice")
