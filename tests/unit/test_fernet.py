"""The worker's Fernet opener reads exactly what cryptography's Fernet seals, and refuses
every token cryptography would refuse (a changed byte anywhere, a cut or lengthened token, a
key not given, a valid MAC over bad padding)."""

from __future__ import annotations

import base64
import hmac
import os
import random
import threading

import pytest
from cryptography.fernet import Fernet, MultiFernet
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from django_pqjobs.fernet import InvalidToken, Opener
from tests.helpers import bound

KEYS = [Fernet.generate_key().decode() for _ in range(3)]


def test_it_opens_what_fernet_seals_under_any_listed_key_and_every_length():
    opener = Opener(tuple(KEYS))
    for key in KEYS:
        fernet = Fernet(key.encode())
        for size in (*range(0, 70), 1000, 100_000):  # every padding, one block to many
            plain = os.urandom(size)
            assert opener.open(fernet.encrypt(plain).decode()) == plain
    rotated = MultiFernet([Fernet(k.encode()) for k in KEYS])
    assert opener.open(rotated.encrypt(b'{"card": "4111"}').decode()) == b'{"card": "4111"}'


def test_a_key_not_given_opens_nothing():
    token = Fernet(KEYS[0].encode()).encrypt(b"secret").decode()
    with pytest.raises(InvalidToken):
        Opener((KEYS[1], KEYS[2])).open(token)


def _raw(token: str) -> bytearray:
    return bytearray(base64.urlsafe_b64decode(token))


def _text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(bytes(raw)).decode()


def test_every_changed_byte_and_every_cut_is_refused():
    opener = Opener((KEYS[0],))
    token = Fernet(KEYS[0].encode()).encrypt(b'{"amount": 1250, "iban": "DE89"}').decode()
    raw = _raw(token)
    for at in range(len(raw)):
        for flip in (0x01, 0x80):
            changed = bytearray(raw)
            changed[at] ^= flip
            with pytest.raises(InvalidToken):
                opener.open(_text(changed))
    for cut in (1, 16, 32, len(raw) - 1):
        with pytest.raises(InvalidToken):
            opener.open(_text(raw[:-cut]))
    for junk in ("", "not base64 !", "é", token + "AAAA", token[:-4]):
        with pytest.raises(InvalidToken):
            opener.open(junk)


def test_a_valid_mac_over_bad_padding_is_refused():
    """A token signed with the right key whose plaintext does not end in PKCS7 padding (only
    a key holder can make one): refused, not returned with garbage."""
    raw_key = base64.urlsafe_b64decode(KEYS[0])
    signing, encryption = raw_key[:16], raw_key[16:]
    iv = os.urandom(16)
    for last in (b"\x00", b"\x11", b"\x02"):  # 0, 17 and a lone 2 are no padding
        plain = b"x" * 15 + last
        encryptor = Cipher(algorithms.AES(encryption), modes.CBC(iv)).encryptor()
        body = (
            b"\x80" + (0).to_bytes(8, "big") + iv + encryptor.update(plain) + encryptor.finalize()
        )
        token = _text(body + hmac.digest(signing, body, "sha256"))
        with pytest.raises(InvalidToken):
            Opener((KEYS[0],)).open(token)


def test_threads_open_at_once_without_mixing_their_blocks():
    opener = Opener(tuple(KEYS))
    fernets = [Fernet(k.encode()) for k in KEYS]
    cases = []
    for _ in range(600):
        plain = os.urandom(random.randrange(0, 200))
        cases.append((random.choice(fernets).encrypt(plain).decode(), plain))
    wrong: list[int] = []

    def work(offset: int) -> None:
        for n in range(offset, len(cases), 6):
            token, plain = cases[n]
            if opener.open(token) != plain:
                wrong.append(n)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(bound(30))
    assert wrong == []


def test_a_key_that_is_not_32_bytes_is_refused():
    with pytest.raises(ValueError, match="32 bytes"):
        Opener((base64.urlsafe_b64encode(b"short").decode(),))


def test_its_hmac_is_the_standard_one():
    from django_pqjobs.fernet import _Signer

    for size in (0, 1, 73, 1000):
        key, message = os.urandom(16), os.urandom(size)
        assert _Signer(key).mac(message) == hmac.digest(key, message, "sha256")
