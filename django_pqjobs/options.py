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

import functools
import math
import re
import string
import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from enum import IntEnum
from typing import Any, Literal
from uuid import UUID

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


def run_after_or_delay(when: object, wait: object, what: str) -> tuple[datetime | None, float]:
    """Validate the two ways to say when a job may run (at most one may be given)."""
    if when is not None and wait is not None:
        raise InvalidJobOption(f"{what}: give run_after or delay, not both")
    if when is not None:
        return run_after(when, f"{what} run_after"), 0.0
    seconds = 0.0 if wait is None else delay(wait, f"{what} delay")
    if seconds and datetime.now(UTC) + timedelta(seconds=seconds) > LATEST_RUN_AFTER:
        raise InvalidJobOption(f"{what} delay reaches past the year 9999, got {wait!r}")
    return None, seconds


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


KeyTemplate = str | Callable[[Any], "str | None"]

# A value goes into a key as these characters only: ASCII letters, digits, "-", "_", ".", and
# "%" for the percent-encoding (UTF-8 bytes as %XX) of every other character, "%" included.
# Numbers, UUIDs and dates are written with them too.
_KEY_SAFE_BYTES = frozenset((string.ascii_letters + string.digits + "-_.").encode())
_KEY_PLAIN = re.compile(r"[A-Za-z0-9_.\-]*")
_KEY_VALUE_CHARS = frozenset(string.ascii_letters + string.digits + "-_.%")
# C0 (NUL included), DEL and C1.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# A decimal number written as int() and Decimal() read it, without an exponent: a sign,
# digits (any Unicode decimal digits, single "_" between two), a point, more digits.
_DIGITS = r"\d(?:_?\d)*"
_NUMBER_TEXT = re.compile(rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})")
_KEY_VALUE_TYPES = "text, a number (int, float, Decimal), a UUID or a date"


def key_template(value: object, what: str) -> KeyTemplate:
    """A key derived from each job's payload: a format string over the payload's fields
    (``"account:{account_id}"``) or a callable ``fn(payload) -> str | None``.

    A format string must keep the keys of different payloads apart: two fields need a
    character between them that no value is written with (anything but ASCII letters,
    digits, ``-``, ``_``, ``.`` and ``%``, e.g. ``:`` or ``/``).
    """
    if callable(value):
        return value
    if not isinstance(value, str) or not value.strip():
        raise InvalidJobOption(
            f"{what} must be a format string like 'account:{{account_id}}' or a callable, "
            f"got {value!r}"
        )
    try:
        _template_parts(value)
    except ValueError as exc:
        raise InvalidJobOption(f"{what} {value!r}: {exc}") from None
    return value


@functools.lru_cache(maxsize=256)
def _template_parts(template: str) -> tuple[tuple[str, str | None], ...]:
    """The template as (literal text, field name or None) pairs; ValueError says what is
    wrong with it."""
    if _CONTROL.search(template):
        raise ValueError("a key template must not contain control characters")
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"not a valid format string: {exc}") from None
    parts: list[tuple[str, str | None]] = []
    for literal, field, spec, conversion in parsed:
        if field is not None and not field.isidentifier():
            raise ValueError(
                f"'{{{field}}}' must name a payload field "
                "(plain names only, no positions, indexing or attributes)"
            )
        if spec or conversion:
            raise ValueError(
                f"the field {field!r} has a conversion or format spec; values are written "
                "in their canonical form (see 'How keys are built' in the flow-control guide)"
            )
        if parts and parts[-1][1] is not None and field is not None:
            if not literal:
                raise ValueError(
                    f"'{{{parts[-1][1]}}}' and '{{{field}}}' are next to each other, so "
                    "different values could make the same key; put a separator such as ':' "
                    "between them"
                )
            if set(literal) <= _KEY_VALUE_CHARS:
                raise ValueError(
                    f"'{{{parts[-1][1]}}}' and '{{{field}}}' are separated by {literal!r} only, "
                    "which the values themselves may contain (letters, digits, '-', '_', '.', "
                    "'%'), so different values could make the same key; put a separator such "
                    "as ':' or '/' between them"
                )
        parts.append((literal, field))
    return tuple(parts)


def derive_key(template: KeyTemplate, payload: Any, what: str) -> str | None:
    """The key of one job: the template filled from its payload, or the callable's answer.

    Each field's value is written in its canonical form and escaped (see
    :func:`_key_value`), so values that mean the same give the same key and different ones
    never do. A callable's answer is taken as it is, but checked like any key
    (:func:`flow_key`).
    """
    if callable(template):
        try:
            key = template(payload)
        except Exception as exc:
            raise InvalidJobOption(f"{what}: the key function raised {exc!r}") from exc
        return flow_key(key, what)
    if not isinstance(payload, dict):
        raise InvalidJobOption(f"{what} {template!r} needs a payload that is a dict")
    try:
        parts = _template_parts(template)
    except ValueError as exc:
        raise InvalidJobOption(f"{what} {template!r}: {exc}") from None
    pieces: list[str] = []
    for literal, field in parts:
        pieces.append(literal)
        if field is None:
            continue
        try:
            value = payload[field]
        except KeyError:
            raise InvalidJobOption(
                f"{what} {template!r} needs the payload field {field!r}"
            ) from None
        try:
            pieces.append(_key_value(value))
        except ValueError as exc:
            raise InvalidJobOption(
                f"{what} {template!r}: the payload field {field!r} {exc}"
            ) from None
    # the template and the values were checked for control characters
    return dedupe_key("".join(pieces), what)


def flow_key(value: object, what: str) -> str | None:
    """A concurrency or rate key as it is stored: None, or text that fits the column and
    holds no control characters (C0, DEL, C1)."""
    key = dedupe_key(value, what)
    if key is not None and _CONTROL.search(key):
        raise InvalidJobOption(
            f"{what} must not contain control characters ({_first_control(key)}): {key!r:.120}"
        )
    return key


def _key_value(value: object) -> str:
    """One payload value as it goes into a key: canonical, then escaped.

    - An int, or a float or ``Decimal`` of integral value: the decimal integer (``1``,
      ``1.0``, ``Decimal("1.00")`` give ``"1"``). Other finite numbers: exact decimal
      notation without exponent or trailing zeros; a float as its shortest round-trip form
      (``0.1``, ``1e-07`` gives ``"0.0000001"``).
    - Text: NFC-normalised, surrounding whitespace stripped. Text that reads as a decimal
      number (``"01"``, ``" +1"``, ``"1_000"``, ``"1.50"``; no exponent) is that number;
      text that ``uuid.UUID()`` reads is that UUID. Any other text is percent-encoded: every
      character but ASCII letters, digits, ``-``, ``_`` and ``.`` becomes ``%XX`` per UTF-8
      byte (``"a:b"`` gives ``"a%3Ab"``).
    - A UUID: its lowercase hyphenated form. A date: ``YYYY-MM-DD``.
    - Refused: bools (``True == 1`` in Python), None, NaN and infinities, text with control
      characters or longer than a key, and every other type (datetimes included: which part
      of one makes the key is for its caller to say).

    Raises ValueError saying what is wrong ("is a bool ...").
    """
    if isinstance(value, str):
        return _text_value(value)
    if isinstance(value, bool):
        raise ValueError(
            f"is a bool ({value!r}); a bool cannot be part of a key because True == 1 and "
            "False == 0 in Python (True would take the key of 1): give a number or text"
        )
    if isinstance(value, int):
        # int(): an IntEnum member as its number; the bit length first: str() of a huge
        # int is slow
        text = "" if value.bit_length() > 4 * DEDUPE_KEY_MAX_LENGTH else str(int(value))
        if not text or len(text) > DEDUPE_KEY_MAX_LENGTH:
            raise ValueError(f"is an int too long for a key ({DEDUPE_KEY_MAX_LENGTH} characters)")
        return text
    if isinstance(value, float | Decimal):
        # float(): a subclass's repr() may not be the number's (numpy's np.float64(1.0))
        number = Decimal(repr(float(value))) if isinstance(value, float) else value
        if not number.is_finite():
            raise ValueError(
                f"is a {type(value).__name__} that is not a finite number ({value!r}); "
                "it cannot be part of a key"
            )
        return _number_text(number)
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, datetime | time | timedelta):
        raise ValueError(
            f"is a {type(value).__name__}; format the part of it that makes the key "
            "(e.g. value.date().isoformat()) or use a key function"
        )
    if isinstance(value, date):
        return value.isoformat()
    kind = "None" if value is None else f"of type {type(value).__name__}"
    raise ValueError(f"is {kind}; a key is built from {_KEY_VALUE_TYPES} (or use a key function)")


def _text_value(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError(
            f"holds a control character ({_first_control(value)}), which cannot be part of "
            f"a key: {value!r:.120}"
        )
    if len(value) > DEDUPE_KEY_MAX_LENGTH:
        raise ValueError(
            f"is longer than a key ({DEDUPE_KEY_MAX_LENGTH} characters): {value!r:.120}"
        )
    text = (value if value.isascii() else unicodedata.normalize("NFC", value)).strip()
    if _NUMBER_TEXT.fullmatch(text):
        return _number_text(Decimal(text))
    if len(text) >= 32:  # the shortest form uuid.UUID() reads: 32 hex digits
        try:
            return str(UUID(text))
        except ValueError:
            pass
    if _KEY_PLAIN.fullmatch(text):
        return text
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(
            f"is not valid Unicode text (it holds a lone surrogate): {value!r:.120}"
        ) from None
    return "".join(chr(byte) if byte in _KEY_SAFE_BYTES else f"%{byte:02X}" for byte in encoded)


def _number_text(number: Decimal) -> str:
    """A finite number in plain decimal notation: no exponent, no leading or trailing zeros
    (``1.50E+1`` -> ``15``, ``-0`` -> ``0``). Exact: no rounding to a context's precision."""
    negative, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)  # finite
    too_long = f"is a number too long for a key ({DEDUPE_KEY_MAX_LENGTH} characters)"
    if len(digits) + abs(exponent) > 2 * DEDUPE_KEY_MAX_LENGTH:  # before writing it out
        raise ValueError(too_long)
    coefficient = "".join(map(str, digits)).lstrip("0")
    if not coefficient:
        return "0"
    if exponent < 0:
        significant = coefficient.rstrip("0")
        cut = min(len(coefficient) - len(significant), -exponent)
        coefficient = coefficient[: len(coefficient) - cut]
        exponent += cut
    if exponent >= 0:
        text = coefficient + "0" * exponent
    else:
        whole, fraction = coefficient[:exponent], coefficient[exponent:]
        text = f"{whole or '0'}.{fraction.rjust(-exponent, '0')}"
    if len(text) + negative > DEDUPE_KEY_MAX_LENGTH:
        raise ValueError(too_long)
    return f"-{text}" if negative else text


def _first_control(text: str) -> str:
    match = _CONTROL.search(text)
    return "" if match is None else f"U+{ord(match.group()):04X}"


WaitingFull = Literal["refuse", "skip"]


def waiting_full(value: object, what: str = "when_waiting_full") -> WaitingFull:
    if value == "refuse":
        return "refuse"
    if value == "skip":
        return "skip"
    raise InvalidJobOption(f"{what} must be 'refuse' or 'skip', got {value!r}")
