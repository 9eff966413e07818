"""adb's RSA authentication, device side: what a secure phone (``ro.adb.secure=1``) asks of a host.

The handshake (AOSP ``protocol.txt``, ``adb_auth.h``): the host's ``CNXN`` is answered with
``AUTH(TOKEN, 0, <20 random bytes>)``. The host signs the token with each of its private keys in
turn, ``AUTH(SIGNATURE, 0, sig)``: RSA PKCS#1 v1.5 over the token used as if it were a SHA-1
digest. A signature that matches a key the phone trusts gets the ``CNXN``; otherwise the phone
sends a fresh token. When the host has no key left it sends ``AUTH(RSAPUBLICKEY, 0,
"<base64 key> user@host\\0")`` and the phone shows the "Allow USB debugging?" dialog; adb lists
the device as ``unauthorized`` until the user taps Allow (:meth:`AdbAuth.allow`), and the
phone then sends its ``CNXN`` on that same connection. "Always allow from this computer" keeps
the key for later connections; without it the key is trusted for that connection only.

Public keys travel in Android's own format (``mincrypt``'s ``RSAPublicKey``: u32 word count,
u32 n0inv, n and R² as little-endian u32 words, u32 exponent), base64-encoded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa, utils

__all__ = [
    "AUTH_RSAPUBLICKEY",
    "AUTH_SIGNATURE",
    "AUTH_TOKEN",
    "TOKEN_SIZE",
    "AdbAuth",
    "AdbKeyError",
    "PendingKey",
    "encode_public_key",
    "parse_public_key",
]

logger = logging.getLogger("droidwire.sim.auth")

AUTH_TOKEN = 1
AUTH_SIGNATURE = 2
AUTH_RSAPUBLICKEY = 3
TOKEN_SIZE = 20
_WORDS = 64  # Android accepts 2048-bit keys only
_KEY_BYTES = 12 + 8 * _WORDS  # 524
MAX_KEYS = 256  # trusted keys kept (a real phone's adb_keys is a small file too)
MAX_PENDING = 16  # "Allow USB debugging?" prompts waiting at once


class AdbKeyError(ValueError):
    """Bytes that are not an adb public key."""


def parse_public_key(text: bytes | str) -> tuple[rsa.RSAPublicKey, str]:
    """``"<base64> user@host"`` (NUL-terminated or not) → (key, comment)."""
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")
    text = text.split("\0", 1)[0]
    b64, _, comment = text.strip().partition(" ")
    try:
        raw = base64.b64decode(b64, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise AdbKeyError(f"not base64: {exc}") from None
    if len(raw) != _KEY_BYTES:
        raise AdbKeyError(f"an adb key is {_KEY_BYTES} bytes, got {len(raw)}")
    words = struct.unpack_from("<I", raw, 0)[0]
    if words != _WORDS:
        raise AdbKeyError(f"unsupported key size: {words * 32} bits")
    n = int.from_bytes(raw[8 : 8 + 4 * _WORDS], "little")
    exponent = struct.unpack_from("<I", raw, 8 + 8 * _WORDS)[0]
    if exponent not in (3, 65537) or n.bit_length() != 2048:
        raise AdbKeyError("not an RSA-2048 adb key")
    return rsa.RSAPublicNumbers(exponent, n).public_key(), comment.strip()


def encode_public_key(key: rsa.RSAPublicKey, comment: str = "") -> str:
    """The ``adbkey.pub`` line for ``key`` (what a host sends in ``AUTH RSAPUBLICKEY``)."""
    numbers = key.public_numbers()
    n = numbers.n
    if n.bit_length() != 2048:
        raise AdbKeyError("adb keys are RSA-2048")
    n0inv = (-pow(n % (1 << 32), -1, 1 << 32)) % (1 << 32)
    rr = pow(2, 4096, n)
    raw = (struct.pack("<II", _WORDS, n0inv) + n.to_bytes(256, "little")
           + rr.to_bytes(256, "little") + struct.pack("<I", numbers.e))
    line = base64.b64encode(raw).decode()
    return f"{line} {comment}".rstrip()


def _fingerprint(key: rsa.RSAPublicKey) -> str:
    n = key.public_numbers().n.to_bytes(256, "big")
    digest = hashlib.md5(n, usedforsecurity=False).hexdigest().upper()
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2))


@dataclass
class PendingKey:
    """A host key offered with ``AUTH RSAPUBLICKEY``, waiting for the user's answer."""

    fingerprint: str
    comment: str
    key: rsa.RSAPublicKey
    on_allow: Callable[[], None] = field(repr=False)


class AdbAuth:
    """The phone's trusted keys and its "Allow USB debugging?" prompts.

    ``auto_allow`` stands for a user who taps "Always allow" on every prompt at once.
    """

    def __init__(self, keys: list[str] | None = None, *, auto_allow: bool = False) -> None:
        self.auto_allow = auto_allow
        # Called (on the device's loop) when a prompt appears: the CLI prints it, tests wait.
        self.on_prompt: Callable[[PendingKey], None] | None = None
        self._trusted: dict[str, tuple[rsa.RSAPublicKey, str]] = {}
        self._pending: dict[str, PendingKey] = {}
        for line in keys or []:
            if line.strip() and not line.lstrip().startswith("#"):
                self.trust(line)

    # trusted keys

    def trust(self, line: str) -> str:
        """Add an ``adbkey.pub`` line to the trusted keys; returns its fingerprint."""
        key, comment = parse_public_key(line)
        fp = _fingerprint(key)
        if fp not in self._trusted and len(self._trusted) >= MAX_KEYS:
            self._trusted.pop(next(iter(self._trusted)))  # the oldest goes
        self._trusted[fp] = (key, comment)
        return fp

    def revoke_all(self) -> None:
        """Settings → "Revoke USB debugging authorizations"."""
        self._trusted.clear()

    @property
    def trusted(self) -> list[str]:
        return list(self._trusted)

    @staticmethod
    def new_token() -> bytes:
        return os.urandom(TOKEN_SIZE)

    def verify(self, token: bytes, signature: bytes,
               extra: list[rsa.RSAPublicKey] | None = None) -> bool:
        """Whether ``signature`` is a trusted key's signature of ``token``."""
        if len(token) != TOKEN_SIZE or not 0 < len(signature) <= 512:
            return False
        keys = [k for k, _ in self._trusted.values()] + list(extra or [])
        for key in keys:
            try:
                key.verify(signature, token, padding.PKCS1v15(), utils.Prehashed(hashes.SHA1()))
            except (InvalidSignature, ValueError):
                continue
            return True
        return False

    # prompts

    def request(self, payload: bytes, on_allow: Callable[[], None]) -> PendingKey:
        """A host offered its public key: show the prompt (or allow at once)."""
        key, comment = parse_public_key(payload)
        fp = _fingerprint(key)
        pending = PendingKey(fp, comment, key, on_allow)
        if fp in self._trusted or self.auto_allow:
            self._trusted.setdefault(fp, (key, comment))
            on_allow()
            return pending
        if fp not in self._pending and len(self._pending) >= MAX_PENDING:
            self._pending.pop(next(iter(self._pending)))  # the oldest prompt is dismissed
        self._pending[fp] = pending
        logger.info("adb authorization requested by %s (RSA key fingerprint %s)", comment, fp)
        if self.on_prompt is not None:
            self.on_prompt(pending)
        return pending

    @property
    def pending(self) -> list[PendingKey]:
        return list(self._pending.values())

    def allow(self, fingerprint: str | None = None, *, always: bool = True) -> int:
        """The user taps Allow on the prompt for ``fingerprint`` (default: every prompt).

        Returns how many prompts were answered. ``always`` is the "Always allow from this
        computer" box: the key is then trusted for later connections too.
        """
        chosen = [p for fp, p in self._pending.items() if fingerprint in (None, fp)]
        for p in chosen:
            del self._pending[p.fingerprint]
            if always:
                self._trusted[p.fingerprint] = (p.key, p.comment)
            p.on_allow()
        return len(chosen)

    def deny(self, fingerprint: str | None = None) -> int:
        """The user dismisses the prompt: the host stays ``unauthorized``."""
        chosen = [fp for fp in self._pending if fingerprint in (None, fp)]
        for fp in chosen:
            del self._pending[fp]
        return len(chosen)

    def forget(self, on_allow: Callable[[], None]) -> None:
        """The connection that asked went away: its prompt disappears."""
        for fp, p in list(self._pending.items()):
            if p.on_allow == on_allow:
                del self._pending[fp]
