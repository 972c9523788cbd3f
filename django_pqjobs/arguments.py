"""Typed job arguments: a handler's second parameter, annotated with a dataclass, a
``TypedDict`` or a pydantic model, is its job's payload as that type.

``@job("send_receipt")`` over ``def send_receipt(ctx, args: Receipt)`` declares it. At
enqueue the payload (an instance, or a dict of the same shape) is checked field by field
and stored as plain JSON; in the worker it is rebuilt as the type and passed to the
handler. A payload that does not fit (one written by an older deploy) fails that job alone,
at once, with the field named. The JSON form of each value: dates and times in ISO 8601,
``Decimal`` and ``UUID`` as strings, an ``Enum`` as its value, sets and tuples as lists.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import re
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any

from .errors import PayloadError
from .protection import Encrypted
from .redaction import is_secret

Path = str


_NO_VALUE: Any = object()


class Mismatch(ValueError):
    """A value that does not fit its declared type: ``path`` names where (``items[2].sku``).

    Its text (``str()``, and so any traceback it ends up in) describes the value by its type
    alone: the payload may be encrypted at rest or the field a secret. :meth:`describe`
    quotes an excerpt of the value where that may be shown."""

    def __init__(
        self, path: Path, message: str, got: Any = _NO_VALUE, detail: str | None = None
    ) -> None:
        self.path, self.message, self.got, self.detail = path, message, got, detail
        super().__init__(self.describe(encrypted=True))  # no value: safe anywhere

    def describe(self, encrypted: Encrypted = False) -> str:
        """The message, for a type declared ``encrypted`` (True: the whole payload; the
        names of the fields sealed one by one). It quotes the value (up to 60 characters,
        and a validator's own words) only when the type is not encrypted, the field is not
        one of its encrypted ones and no name on the path is a secret one
        (``PQJOBS["REDACTED_FIELDS"]``); otherwise it names the value's type alone."""
        quote = self.may_quote(encrypted)
        message = self.detail if quote and self.detail is not None else self.message
        if self.got is not _NO_VALUE:
            message += f", got {type(self.got).__name__}"
            if quote:
                message += f" {self.got!r:.60}"
        return f"{self.path}: {message}" if self.path else message

    def may_quote(self, encrypted: Encrypted) -> bool:
        """Whether a value at this path may be quoted in a message (see :meth:`describe`)."""
        if encrypted is True:
            return False
        if encrypted and _BETWEEN_NAMES.split(self.path, maxsplit=1)[0] in encrypted:
            return False  # a field sealed one by one
        # a dict key on the path is a field name too: its quotes and brackets are not words
        return not is_secret(_NOT_A_WORD.sub(" ", self.path))


# What ends the top-level field's name on a path, and what is not a word of a name on it.
_BETWEEN_NAMES = re.compile(r"[.\[]")
_NOT_A_WORD = re.compile(r"[\[\]'\"]")


@dataclass(frozen=True)
class Arguments:
    """The declared type of a job's arguments, and how its payloads are checked."""

    type: Any
    name: str

    def to_payload(self, value: Any, job_type: str, encrypted: Encrypted = False) -> Any:
        """The JSON form of ``value`` (an instance of the type, or a dict of its shape),
        checked field by field; :class:`~django_pqjobs.PayloadError` names the field (and
        quotes its value only where :meth:`Mismatch.describe` may, by ``encrypted``)."""
        try:
            if isinstance(value, Mapping) and not _is_typeddict(self.type):
                value = _load(value, self.type, "")
            return _dump(value, self.type, "")
        except Mismatch as exc:
            misfit = exc.describe(encrypted)
        raise PayloadError(f"payload for job type {job_type!r} does not fit {self.name}: {misfit}")

    def from_payload(self, payload: Any) -> Any:
        """The payload rebuilt as the type; :class:`Mismatch` names the field that does
        not fit."""
        return load(payload, self.type)


def of_handler(handler: Callable[..., Any]) -> Arguments | None:
    """The typed arguments a handler declares: its second positional parameter, when it is
    annotated with a dataclass, a TypedDict or a pydantic model (None otherwise: a handler
    that takes the context alone, or a second parameter with a default of another type;
    ``manage.py check`` refuses a second parameter the worker could not fill)."""
    try:
        parameters = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError):
        return None
    if len(parameters) < 2 or parameters[1].kind not in (
        inspect.Parameter.POSITIONAL_ONLY,
        inspect.Parameter.POSITIONAL_OR_KEYWORD,
    ):
        return None
    try:
        declared = typing.get_type_hints(handler).get(parameters[1].name)
    except Exception:
        return None  # an annotation that cannot be resolved declares nothing
    if not (is_dataclass_type(declared) or _is_typeddict(declared) or _is_pydantic(declared)):
        return None
    return Arguments(declared, getattr(declared, "__name__", repr(declared)))


# --- one value of any supported annotation (the Tasks framework's typed parameters) -----

_TYPED_LEAVES = (datetime, date, time, Decimal, uuid.UUID, enum.Enum)


def needs_conversion(annotation: Any) -> bool:
    """Whether values of ``annotation`` have a JSON form other than themselves: it names,
    anywhere in it (``list[Item] | None``), a dataclass, a TypedDict, a pydantic model, an
    ``Enum``, ``date``, ``time``, ``datetime``, ``Decimal`` or ``UUID``. Plain JSON types
    and containers of them (``list[int]``, ``dict[str, Any]``, ``set[str]``) do not."""
    if typing.get_origin(annotation) is not None:
        return any(needs_conversion(arg) for arg in typing.get_args(annotation))
    if not isinstance(annotation, type):
        return False
    return (
        issubclass(annotation, _TYPED_LEAVES)
        or is_dataclass_type(annotation)
        or _is_typeddict(annotation)
        or _is_pydantic(annotation)
    )


def dump(value: Any, annotation: Any, path: Path = "") -> Any:
    """The JSON form of ``value``, checked against ``annotation`` (any annotation typed
    arguments support); :class:`Mismatch` names where it does not fit, below ``path``."""
    return _dump(value, annotation, path)


def load(data: Any, annotation: Any, path: Path = "") -> Any:
    """The JSON value ``data`` rebuilt as ``annotation``; :class:`Mismatch` names where it
    does not fit, below ``path``."""
    try:
        return _quick_loader(annotation)(data)
    except Exception:
        pass  # its exception may quote the value: not kept, not even as a context
    # the careful reading, with paths: it says which field does not fit
    return _load(data, annotation, path)


# --- the JSON form ----------------------------------------------------------------------


def is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _is_typeddict(tp: Any) -> bool:
    return typing.is_typeddict(tp)


def _is_pydantic(tp: Any) -> bool:
    return isinstance(tp, type) and hasattr(tp, "model_validate") and hasattr(tp, "model_dump")


@functools.lru_cache(maxsize=256)
def _fields(tp: Any) -> tuple[dict[str, Any], frozenset[str]]:
    """A dataclass's or TypedDict's fields and their types, and the required ones (read
    once per type: resolving the annotations costs more than checking a payload)."""
    hints = typing.get_type_hints(tp)
    if _is_typeddict(tp):
        return hints, frozenset(tp.__required_keys__)
    required = frozenset(
        f.name
        for f in dataclasses.fields(tp)
        if f.init and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    return {f.name: hints[f.name] for f in dataclasses.fields(tp) if f.init}, required


def _at(path: Path, name: str) -> Path:
    return f"{path}.{name}" if path else name


_UNSHARED = object()


def _shared(value: Any, tp: Any, path: Path, convert: Callable[[Any, Any, Path], Any]) -> Any:
    """The forms that dump and load alike: ``Any``, unions (the first that fits), ``None``,
    ``Literal``. ``_UNSHARED`` for any other type."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or tp is object:
        return value
    if origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return convert(value, option, path)
            except Mismatch:
                continue
        raise Mismatch(path, f"expected {_name(tp)}", value)
    if tp is type(None):
        if value is not None:
            raise Mismatch(path, "expected None", value)
        return None
    if origin is typing.Literal:
        if value not in args:
            raise Mismatch(path, f"expected one of {args!r}", value)
        return value
    return _UNSHARED


def _dump(value: Any, tp: Any, path: Path) -> Any:
    """``value`` of type ``tp`` as JSON (checking that it is one)."""
    shared = _shared(value, tp, path, _dump)
    if shared is not _UNSHARED:
        return shared
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_pydantic(tp):
        if isinstance(value, Mapping):
            value = _validate_pydantic(tp, value, path)
        if not isinstance(value, tp):
            raise Mismatch(path, f"expected {tp.__name__}", value)
        return value.model_dump(mode="json")
    if is_dataclass_type(tp):
        if not isinstance(value, tp):
            raise Mismatch(path, f"expected {tp.__name__}", value)
        fields, _ = _fields(tp)
        return {
            name: _dump(getattr(value, name), kind, _at(path, name))
            for name, kind in fields.items()
        }
    if _is_typeddict(tp):
        if not isinstance(value, Mapping):
            raise Mismatch(path, f"expected {tp.__name__} (a dict)", value)
        return _load_mapping_fields(value, tp, path, _dump)
    if origin in (list, set, frozenset) or tp in (list, set, frozenset):
        if not isinstance(value, (list, tuple, set, frozenset)):
            raise Mismatch(path, f"expected {_name(tp)}", value)
        item = args[0] if args else Any
        return [_dump(v, item, f"{path}[{n}]") for n, v in enumerate(value)]
    if origin is tuple or tp is tuple:
        return _tuple(value, args, path, _dump)
    if origin is dict or tp is dict:
        if not isinstance(value, Mapping):
            raise Mismatch(path, f"expected {_name(tp)}", value)
        item = args[1] if len(args) == 2 else Any
        dumped = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise Mismatch(path, "keys must be strings", key)
            dumped[key] = _dump(v, item, f"{path}[{key!r}]")
        return dumped
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if not isinstance(value, tp):
            raise Mismatch(path, f"expected {tp.__name__}", value)
        return value.value
    return _dump_leaf(value, tp, path)


def _dump_leaf(value: Any, tp: Any, path: Path) -> Any:
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    elif tp is datetime:
        ok = isinstance(value, datetime)
    elif tp is date:
        ok = isinstance(value, date) and not isinstance(value, datetime)
    elif tp in (str, Decimal, uuid.UUID, time):
        ok = isinstance(value, tp)
    else:
        raise Mismatch(path, f"{_name(tp)} has no JSON form here (use a supported type)")
    if not ok:
        raise Mismatch(path, f"expected {_name(tp)}", value)
    if tp in (datetime, date, time):
        return value.isoformat()
    if tp in (Decimal, uuid.UUID):
        return str(value)
    return value


def _load(data: Any, tp: Any, path: Path) -> Any:
    """The JSON value ``data`` rebuilt as ``tp``."""
    shared = _shared(data, tp, path, _load)
    if shared is not _UNSHARED:
        return shared
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if _is_pydantic(tp):
        return _validate_pydantic(tp, data, path)
    if is_dataclass_type(tp) or _is_typeddict(tp):
        if not isinstance(data, Mapping):
            raise Mismatch(path, f"expected {tp.__name__} (an object)", data)
        loaded = _load_mapping_fields(data, tp, path, _load)
        return loaded if _is_typeddict(tp) else tp(**loaded)
    if origin in (list, set, frozenset) or tp in (list, set, frozenset):
        if not isinstance(data, list):
            raise Mismatch(path, f"expected {_name(tp)} (a list)", data)
        item = args[0] if args else Any
        items = [_load(v, item, f"{path}[{n}]") for n, v in enumerate(data)]
        kind = origin or tp
        return items if kind is list else kind(items)
    if origin is tuple or tp is tuple:
        return tuple(_tuple(data, args, path, _load))
    if origin is dict or tp is dict:
        if not isinstance(data, Mapping):
            raise Mismatch(path, f"expected {_name(tp)} (an object)", data)
        item = args[1] if len(args) == 2 else Any
        return {str(k): _load(v, item, f"{path}[{k!r}]") for k, v in data.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        if isinstance(data, tp):
            return data
        try:
            return tp(data)
        except ValueError:
            pass  # Enum's own error quotes the value: raised outside, not even as a context
        allowed = ", ".join(repr(m.value) for m in tp)
        raise Mismatch(path, f"expected one of {tp.__name__}'s values ({allowed})", data)
    return _load_leaf(data, tp, path)


# In the worker every job's payload is rebuilt: a loader made once per type, with the same
# checks as _load but no paths kept, takes a flat dataclass in about a fifth of the time.
# Whatever it refuses is read again by _load, which names the field.


def _exactly(kind: type) -> Callable[[Any], Any]:
    def load(data: Any) -> Any:
        if type(data) is not kind:
            raise TypeError
        return data

    return load


def _as_float(data: Any) -> float:
    if type(data) is float:
        return data
    if type(data) is int:
        return float(data)
    raise TypeError


def _as_bool(data: Any) -> bool:
    if data is True or data is False:
        return data
    raise TypeError


_QUICK_LEAVES: dict[Any, Callable[[Any], Any]] = {
    str: _exactly(str),
    int: _exactly(int),
    float: _as_float,
    bool: _as_bool,
}


@functools.lru_cache(maxsize=512)
def _quick_loader(tp: Any) -> Callable[[Any], Any]:
    if tp in _QUICK_LEAVES:
        return _QUICK_LEAVES[tp]
    if is_dataclass_type(tp) or _is_typeddict(tp):
        fields, required = _fields(tp)
        loaders = {name: _quick_loader(kind) for name, kind in fields.items()}
        known = frozenset(fields)
        build = dict if _is_typeddict(tp) else tp

        def load(data: Any) -> Any:
            if not isinstance(data, Mapping) or not known.issuperset(data):
                raise TypeError
            if not required.issubset(data):
                raise TypeError
            return build(**{name: loaders[name](value) for name, value in data.items()})

        return load
    return functools.partial(_careful, tp)


def _careful(tp: Any, data: Any) -> Any:
    return _load(data, tp, "")


def _load_leaf(data: Any, tp: Any, path: Path) -> Any:
    if isinstance(data, tp) and not (tp is int and isinstance(data, bool)):
        if tp is date and isinstance(data, datetime):
            raise Mismatch(path, "expected a date", data)
        return data
    try:
        if tp is float and isinstance(data, int) and not isinstance(data, bool):
            return float(data)
        if isinstance(data, str):
            if tp is datetime:
                return datetime.fromisoformat(data)
            if tp is date:
                return date.fromisoformat(data)
            if tp is time:
                return time.fromisoformat(data)
            if tp is uuid.UUID:
                return uuid.UUID(data)
        if tp is Decimal and isinstance(data, (str, int)) and not isinstance(data, bool):
            found = Decimal(data)
            if found.is_finite():
                return found
    except (ValueError, InvalidOperation):
        pass
    if tp not in (str, int, float, bool, datetime, date, time, uuid.UUID, Decimal):
        raise Mismatch(path, f"{_name(tp)} has no JSON form here (use a supported type)")
    raise Mismatch(path, f"expected {_name(tp)}", data)


def _load_mapping_fields(
    data: Mapping[str, Any], tp: Any, path: Path, convert: Callable[[Any, Any, Path], Any]
) -> dict[str, Any]:
    fields, required = _fields(tp)
    unknown = sorted(set(data) - set(fields))
    if unknown:
        raise Mismatch(
            path,
            f"{tp.__name__} has no field {', '.join(map(repr, unknown))} "
            f"(its fields: {', '.join(fields)})",
        )
    missing = sorted(required - set(data))
    if missing:
        raise Mismatch(path, f"{tp.__name__} needs {', '.join(map(repr, missing))}")
    return {name: convert(value, fields[name], _at(path, name)) for name, value in data.items()}


def _tuple(
    value: Any, args: tuple[Any, ...], path: Path, convert: Callable[[Any, Any, Path], Any]
) -> list[Any]:
    if not isinstance(value, (list, tuple)):
        raise Mismatch(path, "expected a tuple", value)
    if len(args) == 2 and args[1] is Ellipsis:
        return [convert(v, args[0], f"{path}[{n}]") for n, v in enumerate(value)]
    if args and len(args) != len(value):
        raise Mismatch(path, f"expected {len(args)} items, got {len(value)}")
    kinds = args or (Any,) * len(value)
    return [
        convert(v, kind, f"{path}[{n}]")
        for n, (v, kind) in enumerate(zip(value, kinds, strict=True))
    ]


def _validate_pydantic(tp: Any, data: Any, path: Path) -> Any:
    try:
        return tp.model_validate(data)
    except Exception as exc:  # pydantic's ValidationError, without importing pydantic
        # Its text quotes the input (input_value=...): only its parts are kept, and the
        # Mismatch is raised outside this block, so that the error is not even its context.
        errors = getattr(exc, "errors", None)
        first: Mapping[str, Any] = errors()[0] if callable(errors) else {}
        refused = f"{tp.__name__} refused it ({type(exc).__name__})"
    where = _at(path, ".".join(str(part) for part in first.get("loc", ())))
    kind = str(first.get("type", ""))
    said = str(first.get("msg", refused))
    # pydantic's messages on types and missing fields name no value; a validator's own
    # (value_error, assertion_error, a custom type) may say anything: only its kind is
    # shown where values may not be
    plain = kind.endswith(("_parsing", "_type")) or kind in _PYDANTIC_PLAIN
    message = said if plain or not first else f"{tp.__name__} refused it ({kind})"
    got = _NO_VALUE if kind == "missing" else first.get("input", _NO_VALUE)
    raise Mismatch(where, message, got, said)


_PYDANTIC_PLAIN = frozenset({"missing", "extra_forbidden", "model_type", "dataclass_type"})


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp).replace("typing.", "")
