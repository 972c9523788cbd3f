"""Durations: every delay, timeout and interval accepts a ``timedelta`` or a number of seconds.

Command-line flags also accept compact strings such as ``90s``, ``20m``, ``1h30m`` or ``2d``.
"""

from __future__ import annotations

import math
import re
from datetime import timedelta

from .printable import counted

Duration = timedelta | int | float

# The longest delay, timeout or interval anything takes: beyond it run times leave the
# calendar Python and PostgreSQL share (year 9999), and sums such as "timeout + stale
# timeout" overflow. A retry delay past it failed to record and left its job running.
MAX_DURATION = 100 * 365 * 86400.0

_WORDS = (("day", 86400), ("hour", 3600), ("minute", 60))
_SHORT = ("d", "h", "m")  # the same units, as in_words(short=True) writes them
_UNIT_SECONDS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")

# A wait with no timeout: parked this long (the calendar has no "never").
FOREVER = MAX_DURATION


def to_seconds(value: object, what: str, *, allow_zero: bool = True) -> float:
    """Return ``value`` (a ``timedelta`` or number of seconds) as seconds, or raise ValueError.

    ``what`` names the argument in the error message.
    """
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a timedelta or a number of seconds, got {value!r}")
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float):
        seconds = float(value)
    else:
        raise ValueError(
            f"{what} must be a timedelta or a number of seconds, got {type(value).__name__} "
            f"{value!r}"
        )
    if math.isnan(seconds) or math.isinf(seconds):
        raise ValueError(f"{what} must be a finite duration, got {value!r}")
    if seconds < 0 or (seconds == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "more than zero"
        raise ValueError(f"{what} must be {bound} seconds, got {value!r}")
    if seconds > MAX_DURATION:
        raise ValueError(f"{what} must be at most 100 years ({MAX_DURATION:.0f} s), got {value!r}")
    return seconds


def parse_duration(text: str) -> float:
    """Parse ``"90"``, ``"90s"``, ``"20m"``, ``"1h30m"``, ``"2d"`` into seconds.

    Raises ValueError with the offending text when it is not a duration.
    """
    cleaned = text.strip().lower().replace(" ", "")
    if not cleaned:
        raise ValueError("empty duration")
    try:
        return to_seconds(float(cleaned), "duration")
    except ValueError:
        pass
    pos = 0
    total = 0.0
    for match in _PART.finditer(cleaned):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(cleaned) or pos == 0:
        raise ValueError(
            f"{text!r} is not a duration: use seconds (90) or units like 90s, 20m, 1h30m, 2d"
        )
    return total


def in_words(seconds: float, *, short: bool = False) -> str:
    """A duration as people say it: ``2592000`` is ``"30 days"``, ``5400`` ``"1 hour 30
    minutes"``, ``90.5`` ``"1 minute 30.5 seconds"``, ``0.25`` ``"0.25 seconds"``.
    ``short``: in short units, as a table shows it (``"1 h 30 m"``, ``"1 m 30.5 s"``)."""
    parts = []
    rest = seconds
    for (unit, size), abbreviation in zip(_WORDS, _SHORT, strict=True):
        whole = int(rest // size)
        if whole:
            parts.append(f"{whole} {abbreviation}" if short else counted(whole, unit))
            rest -= whole * size
    rest = round(rest, 3)
    if rest or not parts:
        parts.append(f"{rest:g} s" if short else counted(rest, "second"))
    return " ".join(parts)
