"""RabbitMQ's password hashes, so that users move between RabbitMQ, LavinMQ and Lavin with
their hashes: base64 of a 4-byte random salt followed by H(salt + UTF-8 password)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Mapping
from typing import Final

SHA256: Final = "rabbit_password_hashing_sha256"
SHA512: Final = "rabbit_password_hashing_sha512"
MD5: Final = "rabbit_password_hashing_md5"
DEFAULT_ALGORITHM: Final = SHA256
SALT_SIZE: Final = 4

# algorithm -> hashlib name
_DIGESTS: Final[Mapping[str, str]] = {SHA256: "sha256", SHA512: "sha512", MD5: "md5"}
ALGORITHMS: Final = tuple(_DIGESTS)


def hash_password(password: str, algorithm: str = DEFAULT_ALGORITHM) -> str:
    """A new hash of `password` with a fresh random salt."""
    return _salted_hash(os.urandom(SALT_SIZE), password, _digest(algorithm))


def verify_password(password_hash: str, algorithm: str, password: str) -> bool:
    """Whether `password` matches; an empty hash (a passwordless user) matches nothing.
    The comparison takes the same time wherever the first difference is."""
    if not password_hash:
        return False
    try:
        digest = _digest(algorithm)
        salt = base64.b64decode(password_hash, validate=True)[:SALT_SIZE]
    except (ValueError, binascii.Error):
        return False
    return hmac.compare_digest(_salted_hash(salt, password, digest), password_hash)


def check_hash(password_hash: str, algorithm: str) -> None:
    """ValueError, saying why, unless `password_hash` is a hash `algorithm` can have made
    (or empty, for a passwordless user)."""
    digest = _digest(algorithm)
    if not password_hash:
        return
    try:
        raw = base64.b64decode(password_hash, validate=True)
    except binascii.Error:
        raise ValueError("password_hash is not base64") from None
    expected = SALT_SIZE + hashlib.new(digest).digest_size
    if len(raw) != expected:
        raise ValueError(f"password_hash holds {len(raw)} bytes; {algorithm} hashes hold {expected}")


def _digest(algorithm: str) -> str:
    digest = _DIGESTS.get(algorithm)
    if digest is None:
        raise ValueError(f"unknown hashing algorithm '{algorithm}'; known: {', '.join(ALGORITHMS)}")
    return digest


def _salted_hash(salt: bytes, password: str, digest: str) -> str:
    # surrogateescape: a password that is not valid UTF-8 on the wire still hashes, to a mismatch.
    hashed = hashlib.new(digest, salt + password.encode("utf-8", "surrogateescape")).digest()
    return base64.b64encode(salt + hashed).decode("ascii")
