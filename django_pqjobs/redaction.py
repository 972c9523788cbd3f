"""Secrets in job data, masked for the people who may not see them.

A field whose name says it holds a secret (``PQJOBS["REDACTED_FIELDS"]``: ``password``,
``token``, ``card``, ``iban``, ``ssn`` and the like) is shown as ``[redacted]`` in the admin,
at any depth of a payload, result or progress value, to staff without
``PQJOBS["ADMIN_SECRETS_PERMISSION"]`` (the permission ``django_pqjobs.view_job_secrets`` by
default), and in what the management commands print. A value encrypted at rest shows as
``[encrypted]`` to them. The stored data is never changed: the worker and the handler see
every field.

A name matches when the words of an entry appear together among the words of the field's
name, split at underscores, dashes, dots, spaces and camelCase: ``token`` matches
``access_token`` and ``refreshToken`` but not ``tokenizer``; ``api_key`` matches
``X-Api-Key``.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from .conf import conf
from .options import field_words as words
from .protection import is_sealed

MASK = "[redacted]"
SEALED = "[encrypted]"
TOO_DEEP = "[too deeply nested to show redacted]"

# Deeper than this, a value is not walked (the recursion would be the server's problem):
# the whole of it is hidden instead.
MAX_DEPTH = 100


@functools.lru_cache(maxsize=8)
def _entries(fields: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    return tuple(w for w in (words(field) for field in fields) if w)


@functools.lru_cache(maxsize=4096)
def _is_secret(name: str, fields: tuple[str, ...]) -> bool:
    found = words(name)
    for entry in _entries(fields):
        size = len(entry)
        if any(found[n : n + size] == entry for n in range(len(found) - size + 1)):
            return True
    return False


def is_secret(name: str, fields: Iterable[str] | None = None) -> bool:
    """Whether a field called ``name`` holds a secret (by ``PQJOBS["REDACTED_FIELDS"]``,
    or ``fields``)."""
    chosen = tuple(conf.REDACTED_FIELDS if fields is None else fields)
    return bool(chosen) and _is_secret(name, chosen)


def redact(value: Any, fields: Iterable[str] | None = None) -> Any:
    """A copy of the JSON value ``value`` with the values of secret fields (at any depth)
    replaced by ``[redacted]`` and values encrypted at rest by ``[encrypted]``."""
    chosen = tuple(conf.REDACTED_FIELDS if fields is None else fields)
    return _walk(value, chosen, 0)


def _walk(value: Any, fields: tuple[str, ...], depth: int) -> Any:
    if depth > MAX_DEPTH:
        return TOO_DEEP
    if isinstance(value, dict):
        if is_sealed(value):
            return SEALED
        return {key: _field(key, item, fields, depth) for key, item in value.items()}
    if isinstance(value, list):
        return [_walk(item, fields, depth + 1) for item in value]
    return value


def _field(name: Any, value: Any, fields: tuple[str, ...], depth: int) -> Any:
    if value is None or is_sealed(value):
        return _walk(value, fields, depth + 1)  # nothing to hide, or "[encrypted]"
    if fields and isinstance(name, str) and _is_secret(name, fields):
        return MASK
    return _walk(value, fields, depth + 1)


def may_see_secrets(user: Any) -> bool:
    """Whether ``user`` sees secret fields and encrypted values in the clear (in the admin):
    with ``PQJOBS["ADMIN_SECRETS_PERMISSION"]`` (superusers have it), or when it is None."""
    permission = conf.ADMIN_SECRETS_PERMISSION
    return permission is None or bool(user.has_perm(permission))
