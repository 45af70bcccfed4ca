"""ProtectedIndex version 4 resources (host side): the authenticated AES-GCM chunk writer and reader.

A version-4 resource is stored as a 16-byte salt followed by n = max(1, ceil(D / C)) sealed chunks
(D the decoded length, C = ProtectedIndex.encrypted_chunk_nbytes); chunk i holds plaintext bytes
[i*C, min((i+1)*C, D)) as AES-256-GCM ciphertext followed by its 16-byte tag:

    stored = salt[16] || ct_0 || tag_0 || ... || ct_{n-1} || tag_{n-1}        (16 + D + 16n bytes)

    salt       = HMAC-SHA256(K, "helios.core.v4.salt\\0" || u32be(len id) || id || plaintext)[:16]
    key        = HKDF-SHA256(ikm=K, salt=salt, info="helios.core.v4.resource-key\\0" || id, 32 bytes)
    nonce_i    = 0x00000000 || u64be(i)                        (derived from the chunk position)
    aad_i      = "helios.core.v4\\0" || u32be(4) || u32be(len id) || id || u32be(C) || u64be(i) || u8(final)

K is the AES-256 protection key; `final` is 1 for chunk n-1 only. The synthetic salt makes the
output deterministic while a (key, nonce) pair never seals two different plaintexts. The reader
takes the chunk structure from the signed decoded length and releases a chunk's plaintext only
after its tag verifies; a chunk that fails at its position is retried with the other final flag to
tell a missing final chunk, or bytes after the final chunk, from an altered, reordered or
duplicated one. Bytes after the final chunk are rejected.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from helios.core.errors import (
    BytesAfterFinalChunk,
    ChunkAuthenticationFailed,
    MissingFinalChunk,
    TruncatedChunk,
)

PROTECTED_VERSION = 4
SALT_NBYTES = 16
TAG_NBYTES = 16
DEFAULT_ENCRYPTED_CHUNK_NBYTES = 1 << 20
MAX_ENCRYPTED_CHUNK_NBYTES = 64 << 20


def _id(resource_id: str) -> bytes:
    encoded = resource_id.encode()
    return struct.pack(">I", len(encoded)) + encoded


def _aad(resource_id: str, chunk_nbytes: int, index: int, final: bool) -> bytes:
    return (
        b"helios.core.v4\0"
        + struct.pack(">I", PROTECTED_VERSION)
        + _id(resource_id)
        + struct.pack(">IQB", chunk_nbytes, index, 1 if final else 0)
    )


def _nonce(index: int) -> bytes:
    return b"\0\0\0\0" + struct.pack(">Q", index)


def _resource_key(key: bytes, salt: bytes, resource_id: str) -> AESGCM:
    info = b"helios.core.v4.resource-key\0" + resource_id.encode()
    return AESGCM(HKDF(algorithm=hashes.SHA256(), length=32, salt=salt, info=info).derive(key))


def sealed_chunk_count(decoded_nbytes: int, chunk_nbytes: int) -> int:
    return max(1, -(-decoded_nbytes // chunk_nbytes))


def sealed_nbytes(decoded_nbytes: int, chunk_nbytes: int) -> int:
    """The stored length of a version-4 resource of `decoded_nbytes`."""
    return SALT_NBYTES + decoded_nbytes + TAG_NBYTES * sealed_chunk_count(decoded_nbytes, chunk_nbytes)


def seal_resource(data: bytes | memoryview, resource_id: str, key: bytes, chunk_nbytes: int) -> bytes:
    """The stored bytes of one version-4 resource (see the module docstring for the layout)."""
    view = memoryview(data).cast("B")
    mac = hmac.new(key, b"helios.core.v4.salt\0" + _id(resource_id), hashlib.sha256)
    mac.update(view)
    salt = mac.digest()[:SALT_NBYTES]
    aead = _resource_key(key, salt, resource_id)
    count = sealed_chunk_count(len(view), chunk_nbytes)
    pieces = [salt]
    for index in range(count):
        final = index == count - 1
        plain = view[index * chunk_nbytes : (index + 1) * chunk_nbytes]
        pieces.append(aead.encrypt(_nonce(index), bytes(plain), _aad(resource_id, chunk_nbytes, index, final)))
    return b"".join(pieces)


def unseal_into(
    read: Callable[[int], bytes],
    stored_nbytes: int,
    out: memoryview | None,
    decoded_nbytes: int,
    resource_id: str,
    key: bytes,
    chunk_nbytes: int,
    where: Callable[[int], str],
) -> None:
    """Decrypts a version-4 stream of `stored_nbytes` (pulled through `read(n)`) into `out`.

    The chunk structure follows from the signed `decoded_nbytes`; `out` has that length, or is None
    to check the stream without keeping the plaintext. `where(position)` names the resource and file
    offset of a stream position for error messages.
    """
    if stored_nbytes < SALT_NBYTES:
        raise TruncatedChunk(f"{where(0)}: {stored_nbytes} stored bytes cannot hold the 16-byte salt")
    salt = read(SALT_NBYTES)
    aead = _resource_key(key, salt, resource_id)
    count = sealed_chunk_count(decoded_nbytes, chunk_nbytes)
    position = SALT_NBYTES
    for index in range(count):
        final = index == count - 1
        expected = min(chunk_nbytes, decoded_nbytes - index * chunk_nbytes) + TAG_NBYTES
        record = read(expected)
        if not record:
            after = f"after chunk {index - 1}" if index else "before its first chunk"
            raise MissingFinalChunk(f"{where(position)}: the stream ends {after}; {count} chunks are signed")
        if len(record) < expected:
            raise TruncatedChunk(
                f"{where(position)}: chunk {index} has {len(record)} of its {expected} bytes"
            )
        try:
            plain = aead.decrypt(_nonce(index), record, _aad(resource_id, chunk_nbytes, index, final))
        except InvalidTag:
            try:
                aead.decrypt(_nonce(index), record, _aad(resource_id, chunk_nbytes, index, not final))
            except InvalidTag:
                raise ChunkAuthenticationFailed(
                    f"{where(position)}: chunk {index} does not authenticate at its position "
                    f"(altered, reordered, duplicated or truncated)"
                ) from None
            if final:
                raise MissingFinalChunk(
                    f"{where(position + len(record))}: the stream ends after chunk {index}, "
                    f"which was not sealed as final"
                ) from None
            raise BytesAfterFinalChunk(
                f"{where(position + len(record))}: chunk {index} was sealed as final, yet "
                f"{stored_nbytes - position - len(record)} bytes follow it"
            ) from None
        if out is not None:
            out[index * chunk_nbytes : index * chunk_nbytes + len(plain)] = plain
        position += len(record)
    if position < stored_nbytes or read(1):
        raise BytesAfterFinalChunk(
            f"{where(position)}: {max(stored_nbytes - position, 1)} bytes follow chunk {count - 1}, "
            f"the final chunk"
        )
