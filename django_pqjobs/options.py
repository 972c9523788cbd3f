"""The one place that validates a job's options: names, priority, attempts, timing, dedupe,
isolation, memory and dependencies.

``@job``, ``enqueue_job`` and its siblings, schedules, the ``PQJOBS`` settings and the
command-line flags all call these functions, so a value is judged the same way wherever it
is given. Each returns the normalised value or raises :class:`InvalidJobOption` (a
``ValueError``) whose message names the option (``what``) and the value. The text limits
below are the ``max_length`` of the model fields that store each value (``models.py`` takes
them from here), so whatever passes here fits its column.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import IntEnum
from typing import Literal

from .durations import MAX_DURATION, parse_duration, to_seconds
from .errors import InvalidJobOption
from .statuses import DEPENDENCY_POLICIES, DependencyPolicy

Dedupe = Literal["skip", "replace", "error"]
DEDUPE_STRATEGIES: tuple[Dedupe, ...] = ("skip", "replace", "error")
Isolation = Literal["thread", "process"]
ISOLATION_MODES: tuple[Isolation, ...] = ("thread", "process")

# Integer columns are 32-bit. The range is symmetric: -2**31 cannot be written as a literal
# in PostgreSQL (it parses as the negation of an out-of-range 2**31).
INT_MAX = 2**31 - 1
PRIORITY_MAX = INT_MAX
PRIORITY_MIN = -INT_MAX
# Run times must stay inside Python's calendar after any time zone conversion.
EARLIEST_RUN_AFTER = datetime(1, 1, 2, tzinfo=UTC)
LATEST_RUN_AFTER = datetime(9999, 12, 30, tzinfo=UTC)
MEMORY_MIN = 16 * 1024**2
NAME_MAX_LENGTH = 200  # job types, schedule names, worker ids
QUEUE_MAX_LENGTH = 100
DEDUPE_KEY_MAX_LENGTH = 255
# a fair key's weight (models.FairWeight): 1 .. this
FAIR_WEIGHT_MAX = 1000
ACTOR_MAX_LENGTH = 150  # who did an operator action (a Django username is at most 150)
_MEMORY_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
ID_MAX = 2**63 - 1  # job ids are bigint
# Each edge is a row and each prerequisite is locked at enqueue: a fan-in wider than this
# belongs in a batch with a callback.
DEPENDS_ON_MAX = 10_000


def storable_text(value: str, what: str) -> str:
    """Refuse text PostgreSQL cannot store: NUL characters and lone surrogates."""
    if "\x00" in value:
        raise InvalidJobOption(f"{what} contains a NUL character (\\x00): {value!r:.120}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidJobOption(
            f"{what} is not valid Unicode text (it holds a lone surrogate): {value!r:.120}"
        ) from None
    return value


def _name(value: object, what: str, limit: int) -> str:
    """A name shown in logs and the admin: non-blank text, no control characters."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidJobOption(f"{what} must be a non-empty string, got {value!r:.120}")
    storable_text(value, what)
    if any(ord(char) < 32 or ord(char) == 127 for char in value):
        raise InvalidJobOption(f"{what} must not contain control characters: {value!r:.120}")
    if len(value) > limit:
        raise InvalidJobOption(f"{what} is longer than {limit} characters: {value!r:.120}")
    return value


def job_type_name(value: object, what: str = "job_type") -> str:
    return _name(value, what, NAME_MAX_LENGTH)


def queue_name(value: object, what: str = "queue") -> str:
    return _name(value, what, QUEUE_MAX_LENGTH)


def schedule_name(value: object, what: str = "schedule name") -> str:
    return _name(value, what, NAME_MAX_LENGTH)


def worker_id(value: object, what: str = "worker id") -> str:
    return _name(value, what, NAME_MAX_LENGTH)


def actor(value: object, what: str = "by") -> str:
    """Who did an operator action, as the audit trail and pauses record it."""
    return _name(value, what, ACTOR_MAX_LENGTH)


def dedupe_key(value: object, what: str = "dedupe_key") -> str | None:
    """None (no dedupe) or any non-empty storable text that fits the column."""
    if value is None:
        return None
    limit = DEDUPE_KEY_MAX_LENGTH
    if not isinstance(value, str) or not value or len(value) > limit:
        raise InvalidJobOption(
            f"{what} must be None or a string of 1-{limit} characters, got {value!r:.120}"
        )
    return storable_text(value, what)


class Priority(IntEnum):
    """Named priorities; higher runs first. ``NORMAL`` is the default priority, 0.

    Wherever a priority is taken, a ``Priority``, its name (``"high"``, any case) and a
    whole number are equal: the names stand for these integers, 50 apart so that other
    integers fit between them.
    """

    LOW = -50
    NORMAL = 0
    HIGH = 50
    CRITICAL = 100


_PRIORITY_NAMES = ", ".join(level.name for level in Priority)


def priority(value: object, what: str = "priority") -> int:
    """A whole number, a :class:`Priority` or its name (``"high"``); higher runs first.

    Returns a plain ``int``. Text other than a name is refused, digits included: a number
    has to be given as a number.
    """
    given = value
    if isinstance(value, str):
        value = Priority.__members__.get(value.strip().upper().removeprefix("PRIORITY."), value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidJobOption(
            f"{what} must be a whole number or a Priority ({_PRIORITY_NAMES}), got {given!r:.120}"
        )
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidJobOption(
            f"{what} must be between {PRIORITY_MIN} and {PRIORITY_MAX}, got {given!r:.120}"
        )
    return int(value)


def max_attempts(value: object, what: str = "max_attempts") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT_MAX:
        raise InvalidJobOption(f"{what} must be a whole number of at least 1, got {value!r}")
    return int(value)


def _duration(value: object, what: str, *, allow_zero: bool) -> float:
    try:
        return to_seconds(value, what, allow_zero=allow_zero)
    except ValueError as exc:
        raise InvalidJobOption(str(exc)) from None


def timeout(value: object, what: str = "timeout") -> float:
    """Seconds (a number or ``timedelta``), more than zero."""
    return _duration(value, what, allow_zero=False)


def interval(value: object, what: str = "interval") -> float:
    """Seconds between runs of a schedule, more than zero."""
    return _duration(value, what, allow_zero=False)


def delay(value: object, what: str = "delay") -> float:
    """Seconds to wait before a job may run, zero or more."""
    return _duration(value, what, allow_zero=True)


def run_after(value: object, what: str = "run_after") -> datetime:
    """A timezone-aware datetime within the calendar both Python and PostgreSQL hold."""
    if not isinstance(value, datetime):
        raise InvalidJobOption(f"{what} must be a datetime, got {value!r}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise InvalidJobOption(f"{what} must be timezone-aware, got {value!r}")
    try:
        in_utc = value.astimezone(UTC)
    except OverflowError:
        in_utc = None
    if in_utc is None or not EARLIEST_RUN_AFTER <= in_utc <= LATEST_RUN_AFTER:
        raise InvalidJobOption(f"{what} must be between the years 1 and 9999, got {value!r}")
    return value


# The finished statuses a job may go on holding its dedupe key in, and their bits in the
# unique_states column (sql/schema/uniqueness.sql). Ready, blocked and running always hold
# it; waiting never does (a job with dependencies, or in a batch, has no key).
UNIQUE_STATE_BITS = {"done": 1, "failed": 2, "cancelled": 4}
UNIQUE_BY_MAX_FIELDS = 20


def period(value: object, what: str) -> float:
    """A length of time more than zero: a number of seconds, a ``timedelta`` or ``"1h"``
    (``unique_for``, ``debounce``, ``debounce_max``)."""
    if isinstance(value, str):
        try:
            value = parse_duration(value)
        except ValueError as exc:
            raise InvalidJobOption(f"{what}: {exc}") from None
    return _duration(value, what, allow_zero=False)


def unique_states(value: object, what: str = "unique_states") -> int:
    """The finished statuses a job goes on holding its key in (it always holds it while
    ready, blocked or running): a status name or an iterable of them. Returns their mask
    (0: none). A status that is not finished is refused: naming one would say nothing."""
    names = [value] if isinstance(value, str) else value
    if isinstance(names, (bytes, dict)) or not isinstance(names, Iterable):
        raise InvalidJobOption(f"{what} must be a status or a list of statuses, got {value!r:.120}")
    mask = 0
    for name in names:
        if not isinstance(name, str) or name not in UNIQUE_STATE_BITS:
            raise InvalidJobOption(
                f"{what}: {name!r:.120} is not a finished status a job can go on holding its "
                f"key in; choose from {', '.join(UNIQUE_STATE_BITS)} (a ready, blocked or "
                "running job always holds its key; a waiting job has no key)"
            )
        mask |= UNIQUE_STATE_BITS[name]
    return mask


def unique_by(value: object, what: str = "unique_by") -> str | tuple[str, ...]:
    """What a job's key is derived from when it is given none: ``"payload"`` (all of it)
    or a list of the payload's top-level field names (those fields only)."""
    if value == "payload":
        return "payload"
    fields = None if isinstance(value, (str, bytes, dict)) else value
    if isinstance(fields, Iterable):
        names = tuple(fields)
        if (
            0 < len(names) <= UNIQUE_BY_MAX_FIELDS
            and all(isinstance(name, str) and name for name in names)
            and len(set(names)) == len(names)
        ):
            return tuple(storable_text(name, what) for name in names)
    raise InvalidJobOption(
        f"{what} must be 'payload' or a list of 1-{UNIQUE_BY_MAX_FIELDS} distinct field "
        f"names of the payload, got {value!r:.120}"
    )


def dedupe(value: object, what: str = "dedupe") -> Dedupe:
    for strategy in DEDUPE_STRATEGIES:
        if value == strategy:
            return strategy
    raise InvalidJobOption(f"{what} must be one of {DEDUPE_STRATEGIES}, got {value!r}")


def depends_on(value: object, what: str = "depends_on") -> tuple[int, ...]:
    """Job ids (ints), each once, in order; ``None`` or empty for none."""
    if value is None:
        return ()
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidJobOption(f"{what} must be a list of job ids, got {value!r:.120}")
    ids: dict[int, None] = {}
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int) or not 1 <= item <= ID_MAX:
            raise InvalidJobOption(f"{what} must hold job ids (whole numbers), got {item!r:.120}")
        ids[int(item)] = None
        if len(ids) > DEPENDS_ON_MAX:
            raise InvalidJobOption(
                f"{what}: more than {DEPENDS_ON_MAX:,} dependencies; for a wider fan-in, "
                "enqueue the jobs as a batch with an on_success callback"
            )
    return tuple(ids)


SEQUENCE_FAILURE_POLICIES = ("halt", "continue")


def sequence_on_failure(value: object, what: str = "sequence_on_failure") -> str:
    """What a sequence does when one of its jobs fails for good: ``"halt"`` (the rest wait
    until an operator retries or skips it) or ``"continue"``."""
    if value in SEQUENCE_FAILURE_POLICIES:
        return str(value)
    raise InvalidJobOption(f"{what} must be one of {SEQUENCE_FAILURE_POLICIES}, got {value!r:.120}")


def dependency_policy(value: object, what: str = "on_dependency_failure") -> DependencyPolicy:
    if value is None:
        return "cancel"
    for policy in DEPENDENCY_POLICIES:
        if value == policy:
            return policy
    raise InvalidJobOption(f"{what} must be one of {DEPENDENCY_POLICIES}, got {value!r:.120}")


def isolation(value: object, what: str = "isolation") -> Isolation:
    for mode in ISOLATION_MODES:
        if value == mode:
            return mode
    raise InvalidJobOption(f"{what} must be one of {ISOLATION_MODES}, got {value!r}")


def memory_limit(value: object, what: str = "memory_limit") -> int:
    """Bytes from an int or a string such as ``"512M"``, ``"2G"``, ``"65536K"``."""
    given = value
    if isinstance(value, str):
        text = value.strip().upper().removesuffix("B").removesuffix("I")
        unit = text[-1:] if text[-1:] in _MEMORY_UNITS else ""
        number = text[: len(text) - len(unit)]
        if number.isdigit():
            value = int(number) * _MEMORY_UNITS[unit]
    if isinstance(value, bool) or not isinstance(value, int) or value < MEMORY_MIN:
        raise InvalidJobOption(
            f"{what} must be a number of bytes of at least 16M, or a string like '512M', "
            f"got {given!r}"
        )
    return value


def finite_number(value: object, what: str) -> float:
    """A real number that is neither NaN nor infinite (progress counts and totals)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidJobOption(f"{what} must be a finite number, got {value!r:.120}")
    try:
        number = float(value)
    except OverflowError:
        number = math.inf
    if not math.isfinite(number):
        raise InvalidJobOption(f"{what} must be a finite number, got {value!r:.120}")
    return number


def concurrency_limit(value: object, what: str = "concurrency") -> int:
    """How many jobs of one concurrency key may run at once: a whole number, at least 1."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= INT_MAX:
        raise InvalidJobOption(f"{what} must be a whole number of at least 1, got {value!r}")
    return int(value)


@dataclass(frozen=True)
class Rate:
    """At most ``allowance`` starts per fixed window of ``period`` seconds."""

    allowance: int
    period: float

    def __str__(self) -> str:
        return f"{self.allowance}/{self.period:g}s"


_RATE_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_RATE = re.compile(r"\s*(\d+)\s*/\s*(.+?)\s*")


def rate(value: object, what: str = "rate") -> Rate:
    """``"100/m"``, ``"5/s"``, ``"1000/h"``, ``"20/d"``, or ``"10/30s"`` (any duration)."""
    if isinstance(value, Rate):
        return value
    match = _RATE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidJobOption(
            f"{what} must be a string like '100/m', '5/s', '1000/h' or '10/30s', got {value!r}"
        )
    allowance = int(match.group(1))
    unit = match.group(2)
    try:
        period = _RATE_UNITS[unit] if unit in _RATE_UNITS else parse_duration(unit)
    except ValueError:
        raise InvalidJobOption(f"{what}: {unit!r} is not a period (s, m, h, d or 30s)") from None
    if allowance < 1 or allowance > INT_MAX:
        raise InvalidJobOption(f"{what} must allow at least 1 start, got {value!r}")
    if not 0.001 <= period <= MAX_DURATION:
        raise InvalidJobOption(f"{what} needs a period between 1 ms and 100 years: {value!r}")
    return Rate(allowance, period)


WaitingFull = Literal["refuse", "skip"]


def waiting_full(value: object, what: str = "when_waiting_full") -> WaitingFull:
    if value == "refuse":
        return "refuse"
    if value == "skip":
        return "skip"
    raise InvalidJobOption(f"{what} must be 'refuse' or 'skip', got {value!r}")


# The names of fields that hold secrets, masked in the admin (redaction.py) unless
# PQJOBS["REDACTED_FIELDS"] says otherwise.
DEFAULT_REDACTED_FIELDS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "api_key",
    "apikey",
    "authorization",
    "cookie",
    "private_key",
    "card",
    "card_number",
    "cvv",
    "cvc",
    "pin",
    "iban",
    "account_number",
    "ssn",
)

_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def field_words(name: str) -> tuple[str, ...]:
    """The words of a field name, lower-cased: ``"X-Api-Key"`` -> ``("x", "api", "key")``,
    ``"accessToken"`` -> ``("access", "token")``."""
    return tuple(word.lower() for word in _WORD.findall(name))
