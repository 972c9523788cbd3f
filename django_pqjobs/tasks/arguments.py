"""The framework's rule for task arguments and return values: they must round-trip through
JSON. Checked at enqueue (arguments) and in the worker (return values), so a bad value is
refused where it is made, with the task and the value's place in the error. Arguments of
typed parameters (:mod:`.typed`) are turned into their JSON form before this check."""

from __future__ import annotations

import math
from typing import Any

from .errors import TaskArgumentsError, TaskReturnValueError

_ALLOWED = "str, int, float, bool, None, and lists and dicts (with string keys) of those"


class _NotJSON(Exception):
    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        self.problem = problem


def normalize_arguments(
    task_path: str, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """Arguments as they will come back from the database (tuples become lists).

    Raises :class:`TaskArgumentsError` naming the task and the argument for anything that
    would not come back equal: datetimes, decimals, UUIDs, sets, bytes, model instances,
    non-string dict keys, NaN and infinities.
    """
    try:
        clean_args = [_normalize(value, f"args[{i}]") for i, value in enumerate(args)]
        clean_kwargs = {
            name: _normalize(value, f"kwargs[{name!r}]") for name, value in kwargs.items()
        }
    except _NotJSON as exc:
        raise TaskArgumentsError(
            f"task {task_path!r}: argument {exc.where} {exc.problem}, which does not round-trip "
            f"through JSON (task arguments must be {_ALLOWED}; pass e.g. an id or an ISO "
            "string instead)"
        ) from None
    return clean_args, clean_kwargs


def normalize_return_value(task_path: str, value: Any) -> Any:
    """The return value as it will come back from the database, or TaskReturnValueError."""
    try:
        return _normalize(value, "the return value")
    except _NotJSON as exc:
        where = "" if exc.where == "the return value" else f" at {exc.where}"
        raise TaskReturnValueError(
            f"task {task_path!r} returned a value that does not round-trip through JSON"
            f"{where}: it {exc.problem} (return values must be {_ALLOWED})"
        ) from None


def _normalize(value: Any, where: str, depth: int = 0) -> Any:
    if depth > 100:
        outermost = where.split("]", 1)[0] + "]" if "]" in where else where
        raise _NotJSON(outermost, "is nested more than 100 levels deep")
    if value is None or isinstance(value, str | bool | int):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        raise _NotJSON(where, f"is {value!r}")
    if isinstance(value, list | tuple):
        return [_normalize(item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value)]
    if isinstance(value, dict):
        clean: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _NotJSON(where, f"has a key {key!r} that is not a string")
            clean[key] = _normalize(item, f"{where}[{key!r}]", depth + 1)
        return clean
    kind = type(value)
    name = (
        kind.__qualname__
        if kind.__module__ == "builtins"
        else f"{kind.__module__}.{kind.__qualname__}"
    )
    raise _NotJSON(where, f"is a {name}")
