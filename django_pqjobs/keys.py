"""Keys: the templates job types declare for flow control (``concurrency_key="tenant:{id}"``)
and the one canonical, escaped form each payload value takes in a key; and the dedupe key
a unique job without one gets from its payload (:func:`payload_key`).

Canonical: values that mean the same give the same key (``1``, ``1.0``, ``"01"``), so a
limit cannot be multiplied by writing a value another way. Injective: different values
never give the same key (each value is escaped so it cannot contain a template's
separators; templates whose fields could run together are refused at declaration). The
rules are documented in the flow-control guide, "How keys are built".
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import string
import unicodedata
from collections.abc import Callable
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

from .errors import InvalidJobOption
from .options import DEDUPE_KEY_MAX_LENGTH, dedupe_key

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


def payload_key(payload_json: str, unique_by: str | tuple[str, ...], where: str) -> str:
    """The dedupe key of a unique job given none: a digest of its payload (``"payload"``)
    or of the fields ``unique_by`` names, as canonical JSON (keys sorted, no spaces), so
    payloads that are equal as JSON get one key however their keys were ordered. A field
    the payload lacks is left out (which differs from a field that is null)."""
    document = json.loads(payload_json)
    if unique_by == "payload":
        label, chosen = "payload", document
    else:
        if not isinstance(document, dict):
            raise InvalidJobOption(
                f"{where} unique_by names fields ({', '.join(unique_by)}), but the payload is "
                f"not a JSON object: {payload_json:.120}"
            )
        label = ",".join(unique_by)
        chosen = {name: document[name] for name in unique_by if name in document}
    canonical = json.dumps(chosen, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digest = hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{label[:200]}#{digest}"
