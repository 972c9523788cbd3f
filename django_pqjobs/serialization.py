"""JSON and text the way PostgreSQL will store them: payloads, results, progress, errors.

jsonb refuses some of what Python's ``json`` writes: the escape ``\\u0000`` and lone
surrogates, and ``NaN`` is not JSON at all. A value that nests too deeply is written fine
but cannot be read back by the worker. Text columns refuse NUL characters. Checking here,
before anything reaches the database, means a bad value is refused where it was made, with
a message that says what is wrong, instead of failing a statement that also carries other
jobs.
"""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Model

from .errors import PayloadError

# Deeper values are refused: the worker decodes a payload inside a thread whose stack
# already holds frames, and the admin pretty-prints with the recursive pure-Python encoder.
MAX_NESTING = 100
ERROR_TEXT_LIMIT = 10 * 1024

# A JSON "\u0000" escape that is not itself an escaped backslash.
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
# A string literal in JSON text (with its escapes), to skip when measuring nesting.
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


_JSON_BRACKET = re.compile(r"[\[\]{}]")


class _Unencodable(TypeError):
    """Raised by the encoder for a value it cannot write, which it carries so that the
    error can say where in the payload it sits and what to pass instead."""

    def __init__(self, value: Any) -> None:
        super().__init__(f"Object of type {type(value).__name__} is not JSON serializable")
        self.value = value


class _Encoder(DjangoJSONEncoder):
    """Django's encoder, raising :class:`_Unencodable` for what it cannot write, and writing
    datetimes and times with their microseconds (Django's cuts them to milliseconds: jobs
    enqueued within one millisecond would carry the same time, and a time read back would
    not equal the one sent)."""

    def default(self, o: Any) -> Any:
        if isinstance(o, datetime.datetime):
            text = o.isoformat()
            return text.removesuffix("+00:00") + "Z" if text.endswith("+00:00") else text
        if isinstance(o, datetime.time) and o.utcoffset() is None:
            return o.isoformat()
        try:
            return super().default(o)
        except TypeError:
            raise _Unencodable(o) from None


# One encoder for every call (it keeps no state between calls): ``json.dumps(cls=...)``
# built a new one each time, which cost a worker more per job than encoding the result.
_ENCODER = _Encoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def nests_deeper_than(text: str, levels: int) -> bool:
    """Whether the arrays and objects of JSON ``text`` nest more than ``levels`` deep."""
    if text.count("[") + text.count("{") <= levels:
        return False  # the common case, decided at C speed
    depth = 0
    for bracket in _JSON_BRACKET.finditer(_JSON_STRING.sub("", text)):
        depth += 1 if bracket.group() in "[{" else -1
        if depth > levels:
            return True
    return False


def to_json(value: Any, what: str, limit: int | None = None, limit_setting: str = "") -> str:
    """``value`` as JSON text that jsonb stores, or :class:`PayloadError` naming ``what``.

    Dates, decimals and UUIDs go through Django's JSON encoder, except that datetimes and
    times keep their microseconds. A model instance, a set or another object JSON cannot
    hold is refused with where it is and what to pass instead. ``limit`` caps the size in
    bytes of the UTF-8 text; ``limit_setting`` names the setting that sets it.
    """
    try:
        text = _ENCODER.encode(value)
    except _Unencodable as exc:
        raise PayloadError(
            f"{what} is not JSON-serialisable: {_unencodable(value, exc.value)}"
        ) from None
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}") from exc
    except RecursionError:
        raise PayloadError(f"{what} is nested too deeply (or refers to itself)") from None
    setting = f" ({limit_setting})" if limit_setting else ""
    if limit is not None and len(text) > limit:  # every character is at least one byte
        raise PayloadError(
            f"{what} is at least {len(text)} bytes of JSON, over the limit of {limit} bytes"
            f"{setting}"
        )
    try:
        encoded = text.encode("utf-8")
    except UnicodeEncodeError:
        raise PayloadError(
            f"{what} holds a lone surrogate (text that is not valid Unicode), which "
            "PostgreSQL cannot store"
        ) from None
    if limit is not None and len(encoded) > limit:
        raise PayloadError(
            f"{what} is {len(encoded)} bytes of JSON, over the limit of {limit} bytes{setting}"
        )
    # The substring test runs at C speed; the regex only when it could match.
    if "\\u0000" in text and _JSON_NUL.search(text):
        raise PayloadError(
            f"{what} contains a NUL character (\\u0000), which PostgreSQL jsonb cannot store"
        )
    if nests_deeper_than(text, MAX_NESTING):
        raise PayloadError(f"{what} nests arrays/objects more than {MAX_NESTING} levels deep")
    return text


def _unencodable(value: Any, culprit: Any) -> str:
    """Where ``culprit`` is in ``value`` and what to pass instead of it."""
    place = _place_of(culprit, value, 0)
    where = "it" if place == "" else f"the value at {place}" if place else "a value in it"
    if isinstance(culprit, Model):
        meta = culprit._meta
        return (
            f"{where} is a model instance ({meta.label}); pass its primary key instead "
            f"(e.g. {meta.model_name}.pk) and fetch the object where it is used"
        )
    if isinstance(culprit, set | frozenset):
        return f"{where} is a {type(culprit).__name__}; pass a list instead (e.g. sorted(...))"
    kind = type(culprit)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    return f"{where} is of type {name}, which JSON cannot hold"


def _place_of(culprit: Any, value: Any, depth: int) -> str | None:
    """The subscripts that lead from ``value`` to ``culprit`` (``""``: it is ``value``), or
    None when it is not there."""
    if value is culprit:
        return ""
    if depth > MAX_NESTING:  # a payload this deep is refused for its depth anyway
        return None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list | tuple):
        items = enumerate(value)
    else:
        return None
    for key, item in items:
        found = _place_of(culprit, item, depth + 1)
        if found is not None:
            return f"[{key!r}]{found}"
    return None


def from_json(text: str | None) -> Any:
    """Decode JSON text read from the database (None stays None)."""
    return None if text is None else json.loads(text)


def storable_text(text: str, limit: int | None = None) -> str:
    """Text a PostgreSQL text column accepts, keeping what it can of ``text``.

    For text nobody validated (exception messages, tracebacks): NUL characters are written
    as ``\\x00`` and lone surrogates as their escapes. With ``limit``, the end is kept (in a
    traceback the exception is at the end) behind a marker saying how much was cut.
    """
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if limit is None or len(text) <= limit:
        return text
    marker = f"[... {len(text) - limit} characters cut ...]\n"
    return marker + text[-(limit - len(marker)) :]


def storable_error(text: str) -> str:
    """An error text or traceback as stored: sanitised and capped at 10 KB."""
    return storable_text(text, ERROR_TEXT_LIMIT)
