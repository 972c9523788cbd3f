"""Encryption at rest: the payloads and results of job types declared ``encrypted=True``.

A protected value is stored as an envelope, ``{"pqjobs_encrypted": "v2:<Fernet token>"}``:
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

An envelope is bound to its job type (and, sealed one by one, to its field): the token is
``v2:`` and a Fernet token of ``pqjobs:2 ["<job type>", "<field>" or null]``, a newline and
the JSON text. Fernet authenticates the whole plaintext, so the binding cannot be changed
without a key; an envelope copied into a job of another type (or another field) opens, names
the type it was sealed for, and fails that job for good (:class:`EnvelopeMoved`). Envelopes
sealed before binding existed (a bare Fernet token of the JSON text) are *unbound*: opened
for any type while ``PQJOBS["ACCEPT_UNBOUND_ENVELOPES"]`` is True (the default), with a
warning once per job type and process; refused once it is False.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Mapping
from typing import Any

from django.core.signals import setting_changed

from .conf import conf
from .errors import InvalidJobOption, PayloadError, PermanentError
from .fernet import InvalidToken, Opener
from .serialization import from_json, to_json

ENVELOPE = "pqjobs_encrypted"
# A bound envelope's token starts with MARK (outside the encryption: it lets SQL tell bound
# envelopes from unbound ones); its plaintext with BOUND and the binding's JSON, a line.
MARK = "v2:"
BOUND = b"pqjobs:2 "

logger = logging.getLogger(__name__)

# A type's declaration: True (the whole payload and result) or the names of the top-level
# fields sealed one by one; False: neither.
Encrypted = bool | tuple[str, ...]


class SealedError(PermanentError):
    """A protected value no key of ``PQJOBS["ENCRYPTION_KEYS"]`` opens (the key that sealed
    it was rotated out, or the list is empty); the job fails for good, nothing runs."""


class EnvelopeMoved(SealedError):
    """An envelope sealed for another job type (or another field) than the one it is read
    for: copied from another job's row. The job fails for good, nothing runs."""


def is_sealed(value: Any) -> bool:
    """Whether ``value`` (a decoded JSON value) is an envelope."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(ENVELOPE), str)


def seal(json_text: str, what: str, job_type: str) -> str:
    """The JSON text of the envelope holding ``json_text``, bound to ``job_type``; ``what``
    names it in errors."""
    return to_json({ENVELOPE: _sealed_token(json_text, what, job_type, None)}, what, None, "")


def _sealed_token(json_text: str, what: str, job_type: str, field: str | None) -> str:
    fernet = _fernet(_keys(what, InvalidJobOption))
    plain = _binding(job_type, field) + json_text.encode("utf-8")
    return MARK + str(fernet.encrypt(plain).decode("ascii"))


@functools.lru_cache(maxsize=1024)
def _binding(job_type: str, field: str | None) -> bytes:
    """The line a bound plaintext starts with (made once per type and field: the worker
    compares it with every payload it opens)."""
    return BOUND + json.dumps([job_type, field], ensure_ascii=False).encode("utf-8") + b"\n"


def seal_value(value: Any, encrypted: Encrypted, json_text: str, what: str, job_type: str) -> str:
    """The JSON text to store for ``value`` (whose JSON text is ``json_text``) of the job
    type ``job_type`` declared ``encrypted``: the text sealed whole, or a copy of the object
    with the named fields sealed one by one, each bound to its field (a field it lacks is
    left out; a value that is not an object is refused: its fields cannot be found)."""
    if encrypted is True:
        return seal(json_text, what, job_type)
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
            where = f"{what}, field {name!r}"
            field = to_json(document[name], where, None, "")
            document[name] = {ENVELOPE: _sealed_token(field, where, job_type, name)}
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


def reveal_value(value: Any, what: str, job_type: str | None) -> Any:
    """``value`` opened: an envelope, or an object whose fields are envelopes (each opened);
    anything else as it is. ``job_type``: the type of the job it was read from, which every
    envelope must be bound to (None: not checked, for a display only). :class:`SealedError`
    when no key opens one, :class:`EnvelopeMoved` when one was sealed for another."""
    if is_sealed(value):
        return reveal(value, what, job_type)
    if holds_sealed(value):
        return {
            name: open_token(v[ENVELOPE], f"{what}, field {name!r}", job_type, name)
            if is_sealed(v)
            else v
            for name, v in value.items()
        }
    return value


def reveal(value: Any, what: str, job_type: str | None) -> Any:
    """``value`` opened if it is an envelope (else as it is); see :func:`reveal_value`."""
    if not is_sealed(value):
        return value
    return open_token(value[ENVELOPE], what, job_type)


def open_token(token: str, what: str, job_type: str | None, field: str | None = None) -> Any:
    """The value an envelope's token holds, checked to be bound to ``job_type`` (and
    ``field``) unless ``job_type`` is None. :class:`SealedError` when no key opens it,
    :class:`EnvelopeMoved` when it was sealed for another type or field."""
    opener = _current or _remember(what)
    marked = token.startswith(MARK)
    try:
        plain = opener.open(token[len(MARK) :] if marked else token)
    except InvalidToken:  # a forged or damaged token, or one sealed with a key not listed
        raise SealedError(
            f"no key of PQJOBS['ENCRYPTION_KEYS'] opens {what} (was the key that sealed it "
            "rotated out?)"
        ) from None
    binding = b"" if job_type is None else _binding(job_type, field)
    if binding and plain.startswith(binding):  # the usual case, at C speed
        return json.loads(plain[len(binding) :].decode("utf-8"))
    if plain.startswith(BOUND):
        line, _, text = plain.partition(b"\n")
        if job_type is not None:
            sealed_type, sealed_field = json.loads(line[len(BOUND) :].decode("utf-8"))
            raise EnvelopeMoved(
                f"{what} was sealed for {_for(sealed_type, sealed_field)}, not for "
                f"{_for(job_type, field)}: refused (an envelope copied from another job's row?)"
            )
        return json.loads(text.decode("utf-8"))
    if marked:  # "v2:" added to an unbound token: the mark is not the plaintext's
        raise SealedError(f"{what} is marked bound to its job type, but its plaintext is not")
    return _unbound(plain, what, job_type)


def _for(job_type: Any, field: Any) -> str:
    return f"job type {job_type!r}" + ("" if field is None else f", field {field!r}")


# The job types an unbound envelope was opened for in this process (warned once each).
_warned: set[str | None] = set()


def _unbound(plain: bytes, what: str, job_type: str | None) -> Any:
    """An envelope sealed before envelopes were bound to their job type (the bare JSON
    text): opened while ``PQJOBS["ACCEPT_UNBOUND_ENVELOPES"]``, else refused."""
    if not conf.ACCEPT_UNBOUND_ENVELOPES:
        raise SealedError(
            f"{what} was sealed before envelopes were bound to their job type, and "
            "PQJOBS['ACCEPT_UNBOUND_ENVELOPES'] is False: refused"
        )
    if job_type not in _warned:
        _warned.add(job_type)
        logger.warning(
            "%s was sealed before envelopes were bound to their job type: opened for job "
            "type %r, which it cannot be checked against (warned once per job type; see "
            "PQJOBS['ACCEPT_UNBOUND_ENVELOPES'])",
            what,
            job_type,
        )
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
