"""The version-4 AES-GCM chunk reader on its own: every stream alteration has its own error."""

from __future__ import annotations

import io

import numpy as np
import pytest

from helios.core import (
    BytesAfterFinalChunk,
    ChunkAuthenticationFailed,
    MissingFinalChunk,
    TruncatedChunk,
)
from helios.core.protected import SALT_NBYTES, TAG_NBYTES, seal_resource, sealed_nbytes, unseal_into
from tests.core.forge import PROTECTION_KEY, random_bytes

C = 100
PLAIN = random_bytes(4 * C + 37, 31)  # four full chunks and a short final one
SEALED = seal_resource(PLAIN, "weights/w", PROTECTION_KEY, C)
RECORD = C + TAG_NBYTES


def unseal(stored: bytes, decoded: int = len(PLAIN), *, resource_id="weights/w", key=PROTECTION_KEY, chunk=C):
    out = bytearray(b"\xaa" * decoded)
    unseal_into(io.BytesIO(stored).read, len(stored), memoryview(out), decoded, resource_id, key, chunk,
                lambda position: f"stream position {position}")
    return bytes(out)


def records(stored: bytes) -> list[bytes]:
    return [stored[i : i + RECORD] for i in range(SALT_NBYTES, len(stored), RECORD)]


def test_round_trip_and_layout():
    assert len(SEALED) == sealed_nbytes(len(PLAIN), C) == SALT_NBYTES + len(PLAIN) + 5 * TAG_NBYTES
    assert unseal(SEALED) == PLAIN
    assert seal_resource(PLAIN, "weights/w", PROTECTION_KEY, C) == SEALED  # deterministic
    empty = seal_resource(b"", "e", PROTECTION_KEY, C)
    assert len(empty) == SALT_NBYTES + TAG_NBYTES and unseal(empty, 0, resource_id="e") == b""


def test_same_key_different_content_never_reuses_a_salt():
    other = bytearray(PLAIN)
    other[-1] ^= 1
    assert seal_resource(bytes(other), "weights/w", PROTECTION_KEY, C)[:SALT_NBYTES] != SEALED[:SALT_NBYTES]


@pytest.mark.parametrize("boundary", range(1, 5))
def test_truncation_at_chunk_boundaries_is_a_missing_final_chunk(boundary):
    with pytest.raises(MissingFinalChunk, match=f"ends after chunk {boundary - 1}; 5 chunks are signed"):
        unseal(SEALED[: SALT_NBYTES + boundary * RECORD])


def test_stream_without_chunks():
    with pytest.raises(MissingFinalChunk, match="before its first chunk"):
        unseal(SEALED[:SALT_NBYTES])
    with pytest.raises(TruncatedChunk, match="salt"):
        unseal(SEALED[:5])


@pytest.mark.parametrize("seed", range(8))
def test_truncation_at_random_offsets(seed):
    cut = int(np.random.default_rng(seed).integers(SALT_NBYTES + 1, len(SEALED)))
    if (cut - SALT_NBYTES) % RECORD == 0:
        cut += 1
    with pytest.raises(TruncatedChunk, match=f"chunk {(cut - SALT_NBYTES) // RECORD} has"):
        unseal(SEALED[:cut])


@pytest.mark.parametrize("nbytes", [1, 2, 15, 16, 17, RECORD, RECORD + 1, 4095, 4096])
def test_appended_bytes_follow_the_final_chunk(nbytes):
    with pytest.raises(BytesAfterFinalChunk, match=f"{nbytes} bytes follow chunk 4, the final chunk"):
        unseal(SEALED + random_bytes(nbytes, nbytes))


def test_reordered_duplicated_and_removed_chunks():
    salt, parts = SEALED[:SALT_NBYTES], records(SEALED)
    with pytest.raises(ChunkAuthenticationFailed, match="chunk 1 "):
        unseal(salt + parts[0] + parts[2] + parts[1] + parts[3] + parts[4])
    with pytest.raises(ChunkAuthenticationFailed, match="chunk 1 "):
        unseal(salt + parts[0] + parts[0] + parts[2] + parts[3] + parts[4])
    with pytest.raises(ChunkAuthenticationFailed, match="chunk 2 "):
        unseal(salt + parts[0] + parts[1] + parts[3] + parts[4], len(PLAIN) - C)
    with pytest.raises(MissingFinalChunk):
        unseal(salt + b"".join(parts[:4]), 4 * C)
    short = seal_resource(PLAIN[: 2 * C], "weights/w", PROTECTION_KEY, C)
    with pytest.raises(BytesAfterFinalChunk, match="chunk 1 was sealed as final"):
        unseal(short + records(short)[0], 3 * C)  # a chunk after the final one, the length signed to match
    with pytest.raises(ChunkAuthenticationFailed, match="chunk 0 "):
        unseal(salt + parts[4] + b"".join(parts[:4]))  # the short final chunk moved first


@pytest.mark.parametrize("seed", range(6))
def test_flipped_bytes_release_no_plaintext_of_their_chunk(seed):
    rng = np.random.default_rng(seed)
    position = int(rng.integers(SALT_NBYTES, len(SEALED)))
    chunk = (position - SALT_NBYTES) // RECORD
    stored = bytearray(SEALED)
    stored[position] ^= int(rng.integers(1, 256))
    out = bytearray(b"\xaa" * len(PLAIN))
    with pytest.raises(ChunkAuthenticationFailed, match=f"chunk {chunk} "):
        unseal_into(io.BytesIO(bytes(stored)).read, len(stored), memoryview(out), len(PLAIN), "weights/w",
                    PROTECTION_KEY, C, str)
    assert out[: chunk * C] == PLAIN[: chunk * C]  # earlier chunks authenticated before release
    assert out[chunk * C :] == b"\xaa" * (len(PLAIN) - chunk * C)  # nothing of the failing chunk or later


def test_associated_data_binds_id_chunk_size_key_and_salt():
    with pytest.raises(ChunkAuthenticationFailed):
        unseal(SEALED, resource_id="weights/other")
    with pytest.raises(ChunkAuthenticationFailed):
        unseal(SEALED, key=bytes(32))
    with pytest.raises(ChunkAuthenticationFailed):
        unseal(bytes([SEALED[0] ^ 1]) + SEALED[1:])
    other = seal_resource(PLAIN, "weights/w", PROTECTION_KEY, 2 * C)
    with pytest.raises(ChunkAuthenticationFailed):
        unseal(other)  # sealed with 200-byte chunks, read with 100


def test_signed_decoded_length_off_by_one():
    with pytest.raises(TruncatedChunk, match="chunk 4 has 53 of its 54 bytes"):
        unseal(SEALED, len(PLAIN) + 1)
    with pytest.raises(ChunkAuthenticationFailed, match="chunk 4 "):
        unseal(SEALED, len(PLAIN) - 1)
