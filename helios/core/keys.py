"""Keys of the core format (host side): Ed25519 signing keys, trust sets, AES-256 protection keys.

Signing keys are written as PEM (PKCS#8 private key, SubjectPublicKeyInfo public key, both
unencrypted) and read as PEM or as the raw 32-byte key. A trust set is built from public keys, key
files, or directories of `*.pub` files; nothing inside a core can add to it.

The ProtectedIndex version 4 key is a separate AES-256 secret: a file holding the 32 raw bytes or
their 64 hexadecimal digits. It is passed explicitly (`protection_key=` / `--protection-key FILE`),
or else read from the file named by the environment variable HELIOS_PROTECTION_KEY_FILE.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from helios.core.errors import KeyFileInvalid, ProtectionKeyMissing
from helios.errors import HeliosError

PROTECTION_KEY_ENV = "HELIOS_PROTECTION_KEY_FILE"
PROTECTION_KEY_NBYTES = 32
_PROTECTION_KEY_ID_LABEL = b"helios.core.v4.key-id"

TrustInput = Ed25519PublicKey | bytes | str | os.PathLike
"""A trusted key: a public key object, its 32 raw bytes, or a key file / trust directory path."""


class KeyFileExists(HeliosError):
    """A key file to create already exists: a signing key is never overwritten silently."""


def _refuse_existing(*paths: str) -> None:
    existing = [p for p in paths if os.path.lexists(p)]
    if existing:
        raise KeyFileExists(f"{existing[0]} already exists; keys are never overwritten (pass --force to replace it)")


def generate_keypair(path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Writes a new Ed25519 private key (PEM, mode 0600) at `path` and its public key at `path.pub`;
    refuses (`KeyFileExists`) when either exists, unless `overwrite`."""
    key = Ed25519PrivateKey.generate()
    private_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path = os.fspath(path)
    if not overwrite:
        _refuse_existing(path, path + ".pub")
    # NOTE: O_EXCL closes the race between the check and the write
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL), 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(private_pem)
    Path(path + ".pub").write_bytes(public_pem)


def _read(path: str | os.PathLike, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as error:
        raise KeyFileInvalid(f"cannot read {what} {os.fspath(path)!r}: {error.strerror}") from None


def load_private_key(path: str | os.PathLike) -> Ed25519PrivateKey:
    """Reads an Ed25519 private key: PEM (PKCS#8, unencrypted) or the raw 32-byte seed."""
    data = _read(path, "private key file")
    if len(data) == 32:
        return Ed25519PrivateKey.from_private_bytes(data)
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as error:
        raise KeyFileInvalid(f"{os.fspath(path)!r} is not a PEM or raw Ed25519 private key: {error}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileInvalid(f"{os.fspath(path)!r} holds a {type(key).__name__}, not an Ed25519 private key")
    return key


def load_public_key(path: str | os.PathLike) -> Ed25519PublicKey:
    """Reads an Ed25519 public key: PEM (SubjectPublicKeyInfo) or the raw 32 bytes."""
    data = _read(path, "public key file")
    if len(data) == 32:
        return Ed25519PublicKey.from_public_bytes(data)
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as error:
        raise KeyFileInvalid(f"{os.fspath(path)!r} is not a PEM or raw Ed25519 public key: {error}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyFileInvalid(f"{os.fspath(path)!r} holds a {type(key).__name__}, not an Ed25519 public key")
    return key


def raw_public_key(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def load_trusted_keys(trusted: TrustInput | Iterable[TrustInput]) -> dict[bytes, Ed25519PublicKey]:
    """Builds a trust set {raw public key: key} from keys, raw bytes, key files and trust directories."""
    items = [trusted] if isinstance(trusted, Ed25519PublicKey | bytes | str | os.PathLike) else list(trusted)
    keys: dict[bytes, Ed25519PublicKey] = {}
    for item in items:
        if isinstance(item, Ed25519PublicKey):
            found = [item]
        elif isinstance(item, bytes):
            if len(item) != 32:
                raise KeyFileInvalid(f"a raw trusted key has 32 bytes, not {len(item)}")
            found = [Ed25519PublicKey.from_public_bytes(item)]
        elif Path(item).is_dir():
            found = [load_public_key(p) for p in sorted(Path(item).glob("*.pub"))]
        else:
            found = [load_public_key(item)]
        for key in found:
            keys[raw_public_key(key)] = key
    return keys


# --- protection keys (ProtectedIndex version 4) -----------------------------------------------


def generate_protection_key(path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Writes a new AES-256 protection key as 64 hexadecimal digits and a newline (mode 0600);
    refuses (`KeyFileExists`) when the file exists, unless `overwrite`."""
    if not overwrite:
        _refuse_existing(os.fspath(path))
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if overwrite else os.O_EXCL), 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(os.urandom(PROTECTION_KEY_NBYTES).hex().encode() + b"\n")


def load_protection_key(path: str | os.PathLike) -> bytes:
    """Reads an AES-256 protection key file: 32 raw bytes, or 64 hexadecimal digits (whitespace ignored)."""
    data = _read(path, "protection key file")
    if len(data) == PROTECTION_KEY_NBYTES:
        return data
    try:
        key = bytes.fromhex(data.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != PROTECTION_KEY_NBYTES:
        raise KeyFileInvalid(
            f"{os.fspath(path)!r} is not an AES-256 protection key (32 raw bytes or 64 hexadecimal digits)"
        )
    return key


def resolve_protection_key(key: bytes | str | os.PathLike | None, where: str) -> bytes:
    """The protection key given (bytes or a key file), else the one HELIOS_PROTECTION_KEY_FILE names."""
    if isinstance(key, bytes):
        if len(key) != PROTECTION_KEY_NBYTES:
            raise KeyFileInvalid(f"a protection key has {PROTECTION_KEY_NBYTES} bytes, not {len(key)}")
        return key
    if key is None:
        key = os.environ.get(PROTECTION_KEY_ENV) or None
    if key is None:
        raise ProtectionKeyMissing(
            f"{where} uses ProtectedIndex version 4: pass its AES-256 key (--protection-key FILE) "
            f"or set {PROTECTION_KEY_ENV}"
        )
    return load_protection_key(key)


def protection_key_id(key: bytes) -> bytes:
    """The 16-byte name of a protection key recorded in the signed index (reveals nothing of the key)."""
    return hmac.new(key, _PROTECTION_KEY_ID_LABEL, hashlib.sha256).digest()[:16]
