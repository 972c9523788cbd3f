"""Encryption at rest: the payloads and results of job types declared ``encrypted=True``.

A protected value is stored as an envelope, ``{"pqjobs_encrypted": "<Fernet token>"}``:
the JSON text of the value, encrypted with the newest key of ``PQJOBS["ENCRYPTION_KEYS"]``
(Fernet: AES-128-CBC with HMAC-SHA256; ``cryptography`` is the ``encryption`` extra). Any
key of the list opens it, so keys rotate: put the new key first, keep the old ones until
the jobs they sealed are pruned. The worker opens a job's payload just before its handler
runs; the application opens results it reads (``wait_for``, a task's result,
``ctx.dependency_results()``); the admin opens them only for users who may see secrets.

``encrypted=("card_number", "cvv")`` seals those top-level fields one by one instead (each
its own envelope), so the rest of the payload stays readable to operators. Whole or by
field, ``pqjobs_enqueue()`` refuses an unsealed payload of the type once ``migrate`` has
published it (``publish``, the table ``pqjobs_protected_type``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from django.core.signals import setting_changed

from .conf import conf
from .errors import InvalidJobOption, PayloadError, PermanentError
from .fernet import InvalidToken, Opener
from .serialization import from_json, to_json

ENVELOPE = "pqjobs_encrypted"

# A type's declaration: True (the whole payload and result) or the names of the top-level
# fields sealed one by one; False: neither.
Encrypted = bool | tuple[str, ...]


class SealedError(PermanentError):
    """A protected value no key of ``PQJOBS["ENCRYPTION_KEYS"]`` opens (the key that sealed
    it was rotated out, or the list is empty); the job fails for good, nothing runs."""


def is_sealed(value: Any) -> bool:
    """Whether ``value`` (a decoded JSON value) is an envelope."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(ENVELOPE), str)


def seal(json_text: str, what: str) -> str:
    """The JSON text of the envelope holding ``json_text``; ``what`` names it in errors."""
    return to_json({ENVELOPE: _sealed_token(json_text, what)}, what, None, "")


def _sealed_token(json_text: str, what: str) -> str:
    fernet = _fernet(_keys(what, InvalidJobOption))
    return str(fernet.encrypt(json_text.encode("utf-8")).decode("ascii"))


def seal_value(value: Any, encrypted: Encrypted, json_text: str, what: str) -> str:
    """The JSON text to store for ``value`` (whose JSON text is ``json_text``) of a type
    declared ``encrypted``: the text sealed whole, or a copy of the object with the named
    fields sealed one by one (a field it lacks is left out; a value that is not an object
    is refused: its fields cannot be found)."""
    if encrypted is True:
        return seal(json_text, what)
    if not encrypted:
        return json_text
    if not isinstance(value, Mapping):
        raise PayloadError(
            f"{what} must be a JSON object: its fields {', '.join(encrypted)} are encrypted "
            f"at rest; got {type(value).__name__}"
        )
    document = from_json(json_text)
    for name in encrypted:
        if name in document:
            field = to_json(document[name], f"{what}, field {name!r}", None, "")
            document[name] = {ENVELOPE: _sealed_token(field, f"{what}, field {name!r}")}
    return to_json(document, what, None, "")


def is_protected(value: Any, encrypted: Encrypted) -> bool:
    """Whether ``value`` is stored as a type declared ``encrypted`` stores it: sealed
    whole, or each of its named fields sealed."""
    if encrypted is True:
        return is_sealed(value)
    if not encrypted or not isinstance(value, Mapping):
        return not encrypted
    return all(is_sealed(value[name]) for name in encrypted if name in value)


def holds_sealed(value: Any) -> bool:
    """Whether ``value`` is an envelope or an object with envelopes among its fields."""
    return is_sealed(value) or (
        isinstance(value, dict) and any(is_sealed(v) for v in value.values())
    )


def reveal_value(value: Any, what: str = "the value") -> Any:
    """``value`` opened: an envelope, or an object whose fields are envelopes (each opened);
    anything else as it is. :class:`SealedError` when no key opens one."""
    if is_sealed(value):
        return reveal(value, what)
    if holds_sealed(value):
        return {
            name: reveal(v, f"{what}, field {name!r}") if is_sealed(v) else v
            for name, v in value.items()
        }
    return value


def reveal(value: Any, what: str = "the value") -> Any:
    """``value`` opened if it is an envelope (else as it is); :class:`SealedError` when no
    key opens it."""
    if not is_sealed(value):
        return value
    return open_token(value[ENVELOPE], what)


def open_token(token: str, what: str) -> Any:
    """The value an envelope's token holds; :class:`SealedError` when no key opens it."""
    opener = _current or _remember(what)
    try:
        plain = opener.open(token)
    except InvalidToken:  # a forged or damaged token, or one sealed with a key not listed
        raise SealedError(
            f"no key of PQJOBS['ENCRYPTION_KEYS'] opens {what} (was the key that sealed it "
            "rotated out?)"
        ) from None
    return json.loads(plain.decode("utf-8"))


# The opener of the keys in settings, kept between jobs (reading the setting costs a
# no-op job's opening a fifth more); forgotten when the settings change (tests).
_current: Opener | None = None


def _remember(what: str) -> Opener:
    global _current
    _current = opener = _opener(_keys(what))
    return opener


def _forget(setting: str, **kwargs: Any) -> None:
    global _current
    if setting == "PQJOBS":
        _current = None


setting_changed.connect(_forget, dispatch_uid="django_pqjobs.protection")


def _keys(what: str, error: type[Exception] = SealedError) -> tuple[str, ...]:
    keys: tuple[str, ...] = conf.ENCRYPTION_KEYS
    if not keys:
        raise error(
            f"{what} is encrypted at rest and PQJOBS['ENCRYPTION_KEYS'] is empty: set it "
            "(Fernet keys, the newest first)"
        )
    return keys


@functools.lru_cache(maxsize=4)
def _opener(keys: tuple[str, ...]) -> Opener:
    # made once per list of keys: opening is the hot path of every encrypted job
    _fernet(keys)  # cryptography installed, or the error that says so
    return Opener(keys)


@functools.lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> Any:
    # the newest key seals (cryptography's Fernet: a fresh IV from os.urandom each time)
    try:
        from cryptography.fernet import Fernet, MultiFernet
    except ImportError:
        raise InvalidJobOption(
            "encrypted job types need the cryptography package: pip install "
            '"django-pqjobs[encryption]"'
        ) from None
    return MultiFernet([Fernet(key.encode("ascii")) for key in keys])
