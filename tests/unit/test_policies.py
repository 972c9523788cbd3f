from datetime import timedelta

import pytest

from django_pqjobs.durations import parse_duration, to_seconds
from django_pqjobs.policies import (
    DelaySequence,
    ExponentialBackoff,
    StepBackoff,
    make_backoff,
    make_delays,
)

DESIGN_STEPS = [60, 300, 1800, 7200, 21600, 21600, 21600]


def test_default_backoff_follows_the_design_document_spread_by_ten_percent():
    policy = make_backoff("default")
    assert isinstance(policy, StepBackoff) and policy.jitter == 0.1
    centre = StepBackoff(rng=lambda: 0.5)
    earliest = StepBackoff(rng=lambda: 0.0)
    latest = StepBackoff(rng=lambda: 1.0)
    assert [centre.delay(n) for n in range(1, 8)] == DESIGN_STEPS
    assert [earliest.delay(n) for n in range(1, 8)] == pytest.approx(
        [0.9 * s for s in DESIGN_STEPS]
    )
    assert [latest.delay(n) for n in range(1, 8)] == pytest.approx([1.1 * s for s in DESIGN_STEPS])
    delays = [policy.delay(1) for _ in range(200)]
    assert all(54 <= d <= 66 for d in delays)
    assert max(delays) - min(delays) > 6  # drawn, not fixed


def test_jitter_false_restores_the_exact_steps():
    exact = StepBackoff(jitter=False, rng=lambda: 0.0)
    assert [exact.delay(n) for n in range(1, 8)] == DESIGN_STEPS
    from_setting = make_backoff({"kind": "steps", "jitter": False})
    assert [from_setting.delay(n) for n in range(1, 8)] == DESIGN_STEPS
    assert make_backoff({"kind": "steps", "steps": [5], "jitter": 0}).delay(1) == 5


def test_step_jitter_takes_a_fraction():
    wide = StepBackoff((100,), jitter=0.25, rng=lambda: 0.0)
    assert wide.delay(1) == 75
    assert make_backoff({"kind": "steps", "steps": [100], "jitter": 0.5}).jitter == 0.5


@pytest.mark.parametrize("jitter", [1, 1.5, -0.1, float("nan"), "10%", None])
def test_step_jitter_out_of_range_is_refused(jitter):
    with pytest.raises(ValueError, match="jitter must be True, False or a fraction"):
        StepBackoff(jitter=jitter)


def test_step_backoff_accepts_timedeltas_and_repeats_last_step():
    policy = make_backoff([timedelta(seconds=5), 10])
    assert policy.jitter == 0.1  # a list of steps is spread like the default
    exact = StepBackoff((timedelta(seconds=5), 10), jitter=False)
    assert [exact.delay(n) for n in (1, 2, 3, 9)] == [5, 10, 10, 10]


def test_exponential_backoff_without_jitter_is_capped():
    policy = ExponentialBackoff(base=1, factor=2, max_delay=10, jitter=False)
    assert [policy.delay(n) for n in range(1, 7)] == [1, 2, 4, 8, 10, 10]
    assert policy.delay(10_000) == 10


def test_exponential_jitter_stays_within_half_to_full_delay():
    low = ExponentialBackoff(base=8, jitter=True, rng=lambda: 0.0)
    high = ExponentialBackoff(base=8, jitter=True, rng=lambda: 0.999999)
    assert low.delay(1) == 4
    assert 7.99 < high.delay(1) <= 8


def test_make_backoff_from_dict_and_callable():
    policy = make_backoff({"kind": "exponential", "base": 2, "jitter": False})
    assert policy.delay(3) == 8
    assert make_backoff(lambda attempt: attempt * 3).delay(2) == 6
    assert isinstance(make_backoff({"kind": "steps", "steps": [1, 2]}), StepBackoff)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("sometimes", "must be 'default'"),
        ([], "at least one step"),
        ([1, -1], "backoff step 2"),
        ({"kind": "linear"}, "'kind' must be"),
        ({"kind": "exponential", "bogus": 1}, "unexpected keyword"),
        ({"kind": "exponential", "factor": 0.5}, "factor"),
        ([float("nan")], "finite"),
    ],
)
def test_bad_backoff_specs_are_refused_with_a_clear_message(spec, message):
    with pytest.raises(ValueError, match=message):
        make_backoff(spec)


def test_idle_poll_sequence_backs_off_and_holds_at_max():
    polls = make_delays([1, 2, 5, 10], "POLL_INTERVALS")
    assert [polls.delay(n) for n in range(6)] == [1, 2, 5, 10, 10, 10]
    with pytest.raises(ValueError, match="non-empty list"):
        make_delays([], "POLL_INTERVALS")
    with pytest.raises(ValueError, match="at least one value"):
        DelaySequence(())


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90", 90),
        ("90s", 90),
        ("20m", 1200),
        ("1h30m", 5400),
        ("2d", 172800),
        ("250ms", 0.25),
        ("1.5h", 5400),
        (" 5 m ", 300),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "abc", "10x", "m5", "5m3", "-5", "1h-3m"])
def test_parse_duration_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_to_seconds_rejects_bad_types_and_negatives():
    assert to_seconds(timedelta(minutes=2), "x") == 120
    for bad in (True, "10", None, -1, float("inf")):
        with pytest.raises(ValueError, match="x"):
            to_seconds(bad, "x")
    with pytest.raises(ValueError, match="more than zero"):
        to_seconds(0, "x", allow_zero=False)
