"""Opening Fernet tokens on the worker's hot path.

cryptography's ``Fernet.decrypt`` makes a new HMAC and a new cipher for every token and
checks its arguments in Python: about 15 µs a token here, as much as all the rest of the
worker's handling of a no-op job. :class:`Opener` reads the same tokens (the Fernet spec,
version ``0x80``: version, timestamp, IV, AES-128-CBC ciphertext, HMAC-SHA256 of all that)
with HMAC-SHA256 states keyed once per key (RFC 2104's inner and outer hashes, copied per
token) and an AES block decryptor made once per key and thread, in a few µs. The MAC is
checked first, in constant time, against each key in turn; no byte of a token whose MAC
does not match is decrypted (Fernet is encrypt-then-MAC), and the padding is checked
after. Sealing stays with cryptography's Fernet (protection.py). tests/unit/test_fernet.py
opens tokens cryptography made and refuses every altered one.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import threading
from typing import Any

VERSION = 0x80
_HEADER = 1 + 8 + 16  # version, timestamp, IV
_MAC = 32
_BLOCK = 16
# URL-safe base64 to the standard alphabet, which binascii decodes in C
_STANDARD = bytes.maketrans(b"-_", b"+/")


class InvalidToken(Exception):
    """No key opens the token (it is damaged, forged, or sealed with a key not given)."""


class _Signer:
    """HMAC-SHA256 under one key (RFC 2104), its inner and outer hashes keyed once: keying
    them anew costs more than hashing a token."""

    def __init__(self, key: bytes) -> None:
        block = key.ljust(64, b"\0")  # SHA-256's block; a Fernet signing key is 16 bytes
        self._inner = hashlib.sha256(bytes(b ^ 0x36 for b in block))
        self._outer = hashlib.sha256(bytes(b ^ 0x5C for b in block))

    def mac(self, message: bytes) -> bytes:
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()


class Opener:
    """Opens tokens sealed with any of ``keys`` (Fernet keys: 32 bytes, URL-safe base64;
    the first 16 sign, the last 16 encrypt). Thread-safe."""

    def __init__(self, keys: tuple[str, ...]) -> None:
        pairs = []
        for key in keys:
            raw = base64.urlsafe_b64decode(key.encode("ascii"))
            if len(raw) != 32:
                raise ValueError("a Fernet key is 32 bytes in URL-safe base64")
            pairs.append((_Signer(raw[:16]), raw[16:]))
        self._keys = tuple(pairs)
        self._local = threading.local()

    def open(self, token: str) -> bytes:
        """The plaintext ``token`` holds; :class:`InvalidToken` if no key opens it."""
        try:
            data = binascii.a2b_base64(token.encode("ascii").translate(_STANDARD))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise InvalidToken from None
        size = len(data) - _HEADER - _MAC
        if size < _BLOCK or size % _BLOCK or data[0] != VERSION:
            raise InvalidToken
        signed, mac = data[:-_MAC], data[-_MAC:]
        key = self._key_of(signed, mac)
        # CBC: each plaintext block is the block decryption of its ciphertext block XOR the
        # ciphertext block before it (the IV for the first). The blocks are decrypted
        # independently (ECB, whole blocks only, so the context holds nothing between
        # calls), and the XOR done at once on the whole as integers.
        ciphertext = signed[_HEADER:]
        decrypted = self._block_decryptor(key).update(ciphertext)
        padded = (
            int.from_bytes(decrypted, "big") ^ int.from_bytes(signed[9:-_BLOCK], "big")
        ).to_bytes(size, "big")
        pad = padded[-1]
        if not 1 <= pad <= _BLOCK or padded[-pad:] != bytes((pad,)) * pad:
            raise InvalidToken
        return padded[:-pad]

    def _key_of(self, signed: bytes, mac: bytes) -> bytes:
        """The encryption key of the first signing key whose MAC of ``signed`` is ``mac``."""
        for signer, key in self._keys:
            if hmac.compare_digest(signer.mac(signed), mac):
                return key
        raise InvalidToken

    def _block_decryptor(self, key: bytes) -> Any:
        contexts = getattr(self._local, "contexts", None)
        if contexts is None:
            contexts = self._local.contexts = {}
        context = contexts.get(key)
        if context is None:
            from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

            context = contexts[key] = Cipher(algorithms.AES(key), modes.ECB()).decryptor()
        return context
