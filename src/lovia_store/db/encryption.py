"""Encryption keys, and the authenticated encryption of what is stored (AES-256-GCM).

A key set is a list: the first key encrypts, every key decrypts, so keys rotate
by putting a new key first and running ``lovia-store rekey``. Each stored value
names the key that sealed it by an id (a hash of the key, never the key), so a
value is opened with its own key, and a value whose key is missing is an
``EncryptionKeyError`` naming the row and that id, never garbage.

The ``cryptography`` package (the ``encryption`` extra) is imported when a
Database with keys first seals or opens a value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserError

__all__ = [
    "KEY_ID_LENGTH",
    "EncryptionKey",
    "KeySet",
    "KeySource",
    "generate_encryption_key",
    "key_sets",
]

KEY_ID_LENGTH = 8
"""Hex digits of a key's id, as stored beside each value it sealed."""

NONCE_LENGTH = 12

KeyMaterial = bytes | str
KeySource = Sequence[KeyMaterial] | Callable[[str], Sequence[KeyMaterial]]
"""``encryption_keys=``: one key set for every tenant, or a function from a tenant
to its key set (a key provider, asked once per tenant per Database)."""


def generate_encryption_key() -> str:
    """A new random key (32 bytes), as the URL-safe base64 text ``encryption_keys`` takes."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode("ascii")


@dataclass(frozen=True)
class EncryptionKey:
    """One AES-256 key and the id stored beside what it sealed."""

    id: str
    secret: bytes = field(repr=False)
    _aead: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def of(cls, material: KeyMaterial) -> EncryptionKey:
        secret = _secret(material)
        digest = hashlib.sha256(b"lovia-store key id\x00" + secret).hexdigest()
        return cls(digest[:KEY_ID_LENGTH], secret)

    def seal(self, data: bytes, context: bytes) -> bytes:
        """The nonce and the ciphertext of ``data``, bound to ``context`` (authenticated)."""
        nonce = os.urandom(NONCE_LENGTH)
        sealed: bytes = self._cipher().encrypt(nonce, data, context)
        return nonce + sealed

    def open(self, sealed: bytes, context: bytes) -> bytes | None:
        """The data ``seal`` sealed; None when it was not sealed by this key for this context."""
        aead = self._aead or self._cipher()
        try:
            opened: bytes = aead.decrypt(sealed[:NONCE_LENGTH], sealed[NONCE_LENGTH:], context)
        except ValueError:
            return None
        except Exception as exc:  # cryptography's InvalidTag: a wrong key, or altered
            if type(exc).__name__ != "InvalidTag":
                raise
            return None
        return opened

    def _cipher(self) -> Any:
        aead = self._aead
        if aead is None:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            aead = AESGCM(self.secret)
            object.__setattr__(self, "_aead", aead)
        return aead


@dataclass(frozen=True)
class KeySet:
    """A tenant's keys: ``keys[0]`` seals, every key opens."""

    keys: tuple[EncryptionKey, ...]
    by_id: dict[str, EncryptionKey] = field(repr=False)
    addressing: bytes = field(repr=False)
    """The key of the digests that name shared values (``lovia_store.db.contents``):
    a keyed hash, so a digest tells nothing about a value to whoever lacks the key."""

    @property
    def current(self) -> EncryptionKey:
        return self.keys[0]

    def digest(self, value: bytes) -> str:
        return hmac.new(self.addressing, value, hashlib.sha256).hexdigest()


def key_set(materials: Sequence[KeyMaterial], what: str) -> KeySet:
    """The key set ``materials`` lists, checked: at least one key, no key twice."""
    if isinstance(materials, str | bytes) or not isinstance(materials, Sequence):
        raise UserError(f"{what} is a list of keys (the first encrypts), not {materials!r:.40}")
    if not materials:
        raise UserError(f"{what} is empty: give at least one key")
    keys = tuple(EncryptionKey.of(material) for material in materials)
    by_id = {key.id: key for key in keys}
    if len(by_id) != len(keys):
        raise UserError(f"{what} lists one key twice")
    addressing = hmac.new(keys[0].secret, b"lovia-store shared values", hashlib.sha256).digest()
    return KeySet(keys, by_id, addressing)


def key_sets(source: KeySource | None) -> Callable[[str], KeySet] | None:
    """Each tenant's key set from ``encryption_keys=`` (None: nothing is encrypted).

    A fixed list is checked now; a provider's answer when a tenant is first used
    (then kept for the Database's life). Refused with ``UserError`` when the
    ``cryptography`` package is not installed.
    """
    if source is None:
        return None
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise UserError(
            "encryption_keys needs the cryptography package: pip install 'lovia-store[encryption]'"
        ) from None
    if callable(source):
        provider = source
        known: dict[str, KeySet] = {}

        def of_tenant(tenant: str) -> KeySet:
            found = known.get(tenant)
            if found is None:
                try:
                    given = provider(tenant)
                except Exception as exc:
                    raise UserError(
                        f"the encryption key provider failed for tenant {tenant!r}: {exc}"
                    ) from exc
                found = known[tenant] = key_set(given, f"the keys of tenant {tenant!r}")
            return found

        return of_tenant
    shared = key_set(source, "encryption_keys")
    return lambda _tenant: shared


def _secret(material: KeyMaterial) -> bytes:
    if isinstance(material, bytes | bytearray):
        secret = bytes(material)
    elif isinstance(material, str):
        try:
            secret = base64.urlsafe_b64decode(material.strip().encode("ascii"))
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise UserError(
                "an encryption key is 32 bytes, or their URL-safe base64 text "
                "(generate_encryption_key()); this text is not base64"
            ) from None
    else:
        raise UserError(f"an encryption key is bytes or base64 text, not {type(material).__name__}")
    if len(secret) != 32:
        raise UserError(f"an encryption key is 32 bytes (AES-256), not {len(secret)}")
    return secret
