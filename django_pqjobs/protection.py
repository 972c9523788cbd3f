"""Encryption at rest: the payloads and results of job types declared ``encrypted=True``.

A protected value is stored as an envelope, ``{"pqjobs_encrypted": "<Fernet token>"}``:
the JSON text of the value, encrypted with the newest key of ``PQJOBS["ENCRYPTION_KEYS"]``
(Fernet: AES-128-CBC with HMAC-SHA256; ``cryptography`` is the ``encryption`` extra). Any
key of the list opens it, so keys rotate: put the new key first, keep the old ones until
the jobs they sealed are pruned. The worker opens a job's payload just before its handler
runs; the application opens results it reads (``wait_for``, a task's result,
``ctx.dependency_results()``); the admin opens them only for users who may see job data.
"""

from __future__ import annotations

import functools
from typing import Any

from .conf import conf
from .errors import InvalidJobOption, PermanentError
from .serialization import from_json, to_json

ENVELOPE = "pqjobs_encrypted"


class SealedError(PermanentError):
    """A protected value no key of ``PQJOBS["ENCRYPTION_KEYS"]`` opens (the key that sealed
    it was rotated out, or the list is empty); the job fails for good, nothing runs."""


def is_sealed(value: Any) -> bool:
    """Whether ``value`` (a decoded JSON value) is an envelope."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(ENVELOPE), str)


def seal(json_text: str, what: str) -> str:
    """The JSON text of the envelope holding ``json_text``; ``what`` names it in errors."""
    token = _keys(what, InvalidJobOption).encrypt(json_text.encode("utf-8")).decode("ascii")
    return to_json({ENVELOPE: token}, what, None, "")


def reveal(value: Any, what: str = "the value") -> Any:
    """``value`` opened if it is an envelope (else as it is); :class:`SealedError` when no
    key opens it."""
    if not is_sealed(value):
        return value
    fernet = _keys(what)
    try:
        plain = fernet.decrypt(value[ENVELOPE].encode("ascii"))
    except (_invalid_token(), UnicodeEncodeError):  # a forged or damaged token
        raise SealedError(
            f"no key of PQJOBS['ENCRYPTION_KEYS'] opens {what} (was the key that sealed it "
            "rotated out?)"
        ) from None
    return from_json(plain.decode("utf-8"))


@functools.cache
def _invalid_token() -> type[Exception]:
    from cryptography.fernet import InvalidToken

    return InvalidToken


def _keys(what: str, error: type[Exception] = SealedError) -> Any:
    keys = conf.ENCRYPTION_KEYS
    if not keys:
        raise error(
            f"{what} is encrypted at rest and PQJOBS['ENCRYPTION_KEYS'] is empty: set it "
            "(Fernet keys, the newest first)"
        )
    return _fernet(keys)


@functools.lru_cache(maxsize=4)
def _fernet(keys: tuple[str, ...]) -> Any:
    # one MultiFernet per list of keys: made once, it is the hot path of every encrypted job
    try:
        from cryptography.fernet import Fernet, MultiFernet
    except ImportError:
        raise InvalidJobOption(
            "encrypted job types need the cryptography package: pip install "
            '"django-pqjobs[encryption]"'
        ) from None
    return MultiFernet([Fernet(key.encode("ascii")) for key in keys])
