"""Typed task parameters: a parameter annotated with a dataclass, a TypedDict, a pydantic
model, a ``datetime``, ``Decimal``, ``UUID``, an ``Enum``, or a container of them
(``list[Item] | None``), takes that type in the task and its JSON form in the job.

At enqueue each argument bound to such a parameter is checked and turned into its JSON form
(:func:`django_pqjobs.arguments.dump`); in the worker it is rebuilt as the type before
the task is called. Other parameters are left as they are: a task without typed parameters
has no plan (:func:`plan_of` returns None) and costs nothing more.
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .. import arguments
from ..arguments import Mismatch
from ..errors import PermanentError
from .errors import TaskArgumentsError

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True)
class TypedParameter:
    """One parameter whose arguments are converted, and its annotation."""

    name: str
    annotation: Any

    def dump(self, value: Any, path: str) -> Any:
        """``value`` as JSON; a dict of a dataclass's shape is taken as one (as for
        ``@job``'s typed arguments)."""
        if isinstance(value, Mapping) and arguments.is_dataclass_type(self.annotation):
            value = arguments.load(value, self.annotation, path)
        return arguments.dump(value, self.annotation, path)

    def load(self, data: Any, path: str) -> Any:
        return arguments.load(data, self.annotation, path)


@dataclass(frozen=True)
class TypedCall:
    """Which of a task's arguments are typed: by position, by keyword, and the ``*args`` /
    ``**kwargs`` parameters for the rest. ``None`` for a parameter left as it is."""

    signature: inspect.Signature
    positional: tuple[TypedParameter | None, ...]
    var_positional: TypedParameter | None
    keywords: Mapping[str, TypedParameter | None]
    var_keyword: TypedParameter | None

    def dump(
        self, task_path: str, args: tuple[Any, ...] | list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The arguments with the typed ones in their JSON form, the others as given.

        Raises :class:`TaskArgumentsError` naming the task, the parameter and the field.
        """
        try:
            self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TaskArgumentsError(f"task {task_path!r}: {exc}") from None
        try:
            return self._convert(args, kwargs, TypedParameter.dump)
        except Mismatch as exc:
            misfit = exc.describe()
        raise TaskArgumentsError(f"task {task_path!r}: argument {misfit}")

    def load(
        self, task_path: str, job_id: int, args: list[Any], kwargs: dict[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The stored arguments with the typed ones rebuilt as their types.

        A stored value that does not fit (written by an older deploy) raises
        :class:`PermanentError`, naming the parameter and the field: retrying cannot help.
        """
        try:
            return self._convert(args, kwargs, TypedParameter.load)
        except Mismatch as exc:
            misfit = exc.describe()  # a value is quoted unless a name on its path is secret
        raise PermanentError(
            f"job {job_id} of task {task_path!r}: the stored argument {misfit} (it no longer "
            "fits the parameter's type: was it enqueued by an older deploy?)"
        )

    def _convert(
        self,
        args: tuple[Any, ...] | list[Any],
        kwargs: dict[str, Any],
        convert: Callable[[TypedParameter, Any, str], Any],
    ) -> tuple[list[Any], dict[str, Any]]:
        converted_args = []
        for index, value in enumerate(args):
            parameter, path = self._at_position(index)
            converted_args.append(value if parameter is None else convert(parameter, value, path))
        converted_kwargs = {}
        for name, value in kwargs.items():
            parameter = self.keywords.get(name, self.var_keyword)
            converted_kwargs[name] = value if parameter is None else convert(parameter, value, name)
        return converted_args, converted_kwargs

    def _at_position(self, index: int) -> tuple[TypedParameter | None, str]:
        if index < len(self.positional):
            parameter = self.positional[index]
            return parameter, parameter.name if parameter else ""
        rest = self.var_positional
        return rest, f"{rest.name}[{index - len(self.positional)}]" if rest else ""


def plan_of(task: Any) -> TypedCall | None:
    """The typed parameters of ``task``'s function, or None when it has none (or when its
    annotations cannot be resolved: then every parameter is left as it is)."""
    func = task.func
    try:
        signature = inspect.signature(func)
        hints = typing.get_type_hints(func)
    except Exception:
        return None
    parameters = list(signature.parameters.values())
    if task.takes_context and parameters:
        parameters = parameters[1:]  # the TaskContext: never an argument of the call
    typed = {
        p.name: TypedParameter(p.name, hints[p.name])
        for p in parameters
        if p.name in hints and arguments.needs_conversion(hints[p.name])
    }
    if not typed:
        return None
    return TypedCall(
        signature=signature.replace(parameters=parameters),
        positional=tuple(typed.get(p.name) for p in parameters if p.kind in _POSITIONAL),
        var_positional=_typed_of_kind(parameters, typed, inspect.Parameter.VAR_POSITIONAL),
        keywords={p.name: typed.get(p.name) for p in parameters if p.kind in _KEYWORD},
        var_keyword=_typed_of_kind(parameters, typed, inspect.Parameter.VAR_KEYWORD),
    )


def _typed_of_kind(
    parameters: list[inspect.Parameter], typed: dict[str, TypedParameter], kind: Any
) -> TypedParameter | None:
    """The typed ``*args`` (or ``**kwargs``) parameter, if the function has a typed one."""
    return next((typed.get(p.name) for p in parameters if p.kind is kind), None)
