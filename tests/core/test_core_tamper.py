"""The tamper suite: every alteration of a core is rejected with its own error, before use.

Three families. Alterations by someone without the signing key (flipped, truncated, appended,
swapped, duplicated, removed bytes) must fail signature, layout or chunk-digest checks. Alterations
signed by the trusted key itself (a buggy or hostile packer: the digests match) must fail the
one-frame rules before a byte is decoded. In every case no resource byte reaches the caller.
"""

from __future__ import annotations

import shutil
import struct

import pytest
import zstandard

import helios.core.reader as reader_module
from helios.core import (
    BadMagic,
    BodyMalformed,
    BodyTooLarge,
    BytesAfterFinalChunk,
    ChunkAuthenticationFailed,
    ChunkDigestMismatch,
    CoreFormatError,
    DecodedLengthMismatch,
    DictionaryNotAllowed,
    EnvelopeInvalid,
    ExtraFrame,
    FrameCorrupt,
    FrameHeaderInvalid,
    LayoutGap,
    LayoutOverlap,
    LocationInvalid,
    MissingContentSize,
    MissingFinalChunk,
    NotAZstdFrame,
    ProtectionKeyMismatch,
    ProtectionKeyMissing,
    ResourceInput,
    SignatureInvalid,
    SkippableFrame,
    TrailingBytes,
    TruncatedFile,
    TruncatedFrame,
    UnsupportedFormatVersion,
    UntrustedKey,
    WindowTooLarge,
    open_core,
    write_core,
)
from helios.core.chunks import CHUNK_NBYTES
from helios.core.frame import encode_resource
from helios.core.protected import SALT_NBYTES, TAG_NBYTES, seal_resource
from helios.proto import core_pb2
from tests.core.forge import (
    OTHER_KEY,
    PROTECTION_KEY,
    PUBLISHER,
    SIGNING_KEY,
    WEIGHT,
    flip,
    forge,
    random_bytes,
    raw_frame,
    rewrite_body,
    skippable_frame,
)
from tests.core.test_core_golden import FORMATS, GOLDEN

BIG = random_bytes(9 << 20, 11)  # incompressible: three chunks of stored bytes


@pytest.fixture(scope="module")
def big_core(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "big.hcore"
    write_core(path, publisher=PUBLISHER, signing_key=SIGNING_KEY, deployment=core_pb2.DeploymentBody(),
               resources=[ResourceInput("small", WEIGHT, b"s" * 1000), ResourceInput("big", WEIGHT, BIG)])
    return path


@pytest.fixture()
def decoder_spy(monkeypatch):
    """Records every call that would decode bytes: none may happen before all checks pass."""
    calls = []
    for name in ("decode_into", "unseal_into"):
        original = getattr(reader_module, name)

        def spy(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(reader_module, name, spy)
    return calls


def open_(path, trust, **extra):
    return open_core(path, trusted_keys=trust, accept=PUBLISHER, protection_key=PROTECTION_KEY, **extra)


def read_rejected(path, trust, resource_id, error, match=None, **extra):
    """Opens and reads one resource, expecting `error`; returns the caller's (zeroed) buffer."""
    with open_(path, trust, **extra) as core:
        out = bytearray(b"\xaa" * core.resources[resource_id].decoded_nbytes)
        with pytest.raises(error, match=match):
            core.read_into(resource_id, out)
    assert out == bytes(len(out)), "resource bytes reached the caller"
    return out


# --- alterations without the key: header and body ---------------------------------------------


def _body_fields(body: bytes) -> dict[int, tuple[int, int]]:
    """{field number: (start, end) of its value} for the length-delimited fields of a CoreBody."""
    fields, position = {}, 0

    def varint(position):
        value, shift = 0, 0
        while True:
            byte = body[position]
            value |= (byte & 0x7F) << shift
            position += 1
            shift += 7
            if not byte & 0x80:
                return value, position

    while position < len(body):
        key, position = varint(position)
        if key & 7 == 0:
            value_start = position
            _, position = varint(position)
            fields[key >> 3] = (value_start, position)
        else:
            length, position = varint(position)
            fields[key >> 3] = (position, position + length)
            position += length
    return fields


def _expected_errors(offset: int, body_offset: int, fields: dict[int, tuple[int, int]]):
    if offset < 8:
        return (BadMagic,)
    if offset < 24:
        return (LayoutOverlap, LayoutGap, TruncatedFile, BodyTooLarge)
    relative = offset - body_offset
    for number, (start, end) in fields.items():
        if start <= relative < end:
            return {
                1: (UnsupportedFormatVersion, BodyMalformed),
                2: (SignatureInvalid,),
                3: (SignatureInvalid,),
                4: (UntrustedKey,),
                5: (BodyMalformed, LocationInvalid, LayoutGap, LayoutOverlap),
                6: (SignatureInvalid,),
            }[number]
    return (BodyMalformed, UnsupportedFormatVersion, EnvelopeInvalid, SignatureInvalid, UntrustedKey)


@pytest.mark.parametrize("format", FORMATS)
def test_every_header_and_body_byte_flipped(tmp_path, trust, format):
    golden = (GOLDEN / FORMATS[format]).read_bytes()
    body_offset = struct.unpack_from("<Q", golden, 8)[0]
    fields = _body_fields(golden[body_offset:])
    path = tmp_path / "c.hcore"
    seen = set()
    for offset in [*range(24), *range(body_offset, len(golden))]:
        path.write_bytes(golden)
        flip(path, offset)
        expected = _expected_errors(offset, body_offset, fields)
        with pytest.raises(CoreFormatError) as caught:
            open_(path, trust)
        assert isinstance(caught.value, expected), (offset, caught.value)
        seen.add(type(caught.value))
    assert {BadMagic, SignatureInvalid, UntrustedKey, BodyMalformed} <= seen


def test_untrusted_signer_and_wrong_acceptance(tmp_path, trust, other_trust):
    path = tmp_path / "c.hcore"
    path.write_bytes((GOLDEN / FORMATS["payload"]).read_bytes())
    with pytest.raises(UntrustedKey):
        open_core(path, trusted_keys=other_trust, accept=PUBLISHER)
    with pytest.raises(UntrustedKey, match="no trusted public key"):
        open_core(path, trusted_keys=[], accept=PUBLISHER)
    forge(path, [("w", encode_resource(b"x"), 1)], key=OTHER_KEY)
    with pytest.raises(UntrustedKey):
        open_core(path, trusted_keys=trust, accept=PUBLISHER)


def test_signature_made_by_another_key_under_a_trusted_public_key(tmp_path, trust):
    path = forge(tmp_path / "c.hcore", [("w", encode_resource(b"x"), 1)], key=OTHER_KEY)
    public = SIGNING_KEY.public_key().public_bytes_raw()
    rewrite_body(path, lambda body: setattr(body, "public_key", public))
    with pytest.raises(SignatureInvalid):
        open_(path, trust)


# --- alterations without the key: resource bytes ----------------------------------------------


def _big_offset(path, trust):
    with open_(path, trust) as core:
        return core.placement("big").offset, core.resources["big"].stored_nbytes


@pytest.mark.parametrize("seed", range(6))
def test_seeded_flips_across_chunks(tmp_path, trust, big_core, decoder_spy, seed):
    import numpy as np

    offset, stored = _big_offset(big_core, trust)
    rng = np.random.default_rng(seed)
    path = tmp_path / "c.hcore"
    for position in rng.integers(0, stored, 4):
        shutil.copyfile(big_core, path)
        flip(path, offset + int(position), int(rng.integers(1, 256)))
        chunk = int(position) // CHUNK_NBYTES
        read_rejected(path, trust, "big", ChunkDigestMismatch, match=f"'big' at file offset .*: chunk {chunk} of 3")
    assert decoder_spy == []


def _chunk(data: bytes, offset: int, index: int) -> bytes:
    return data[offset + index * CHUNK_NBYTES : offset + (index + 1) * CHUNK_NBYTES]


def test_swapped_and_duplicated_chunks(tmp_path, trust, big_core, decoder_spy):
    offset, _ = _big_offset(big_core, trust)
    data = big_core.read_bytes()
    c0, c1 = _chunk(data, offset, 0), _chunk(data, offset, 1)
    path = tmp_path / "c.hcore"
    swapped = data[:offset] + c1 + c0 + data[offset + 2 * CHUNK_NBYTES :]
    path.write_bytes(swapped)
    read_rejected(path, trust, "big", ChunkDigestMismatch, match="chunk 0 of 3")
    duplicated = data[:offset] + c0 + c0 + data[offset + 2 * CHUNK_NBYTES :]
    path.write_bytes(duplicated)
    read_rejected(path, trust, "big", ChunkDigestMismatch, match="chunk 1 of 3")
    assert decoder_spy == []


def test_removed_chunk(tmp_path, trust, big_core):
    offset, stored = _big_offset(big_core, trust)
    data = big_core.read_bytes()
    region = data[24:offset] + data[offset + CHUNK_NBYTES : offset + stored]
    path = tmp_path / "c.hcore"
    path.write_bytes(data)
    rewrite_body(path, lambda body: None, region=region)  # header fixed, LocationSet unchanged
    with pytest.raises(LayoutOverlap, match="run into the body"):
        open_(path, trust)

    def shrink(body):
        body.locations.locations[1].nbytes -= CHUNK_NBYTES

    path.write_bytes(data)
    rewrite_body(path, shrink, region=region)
    with pytest.raises(LocationInvalid, match="'big'.*signed stored length"):
        open_(path, trust)


@pytest.mark.parametrize("cut", ["chunk1", "chunk2", "body", 5, 20, 1234567, 9_000_001])
def test_truncated_files(tmp_path, trust, big_core, cut):
    offset, stored = _big_offset(big_core, trust)
    data = big_core.read_bytes()
    length = {"chunk1": offset + CHUNK_NBYTES, "chunk2": offset + 2 * CHUNK_NBYTES, "body": offset + stored}.get(cut, cut)
    path = tmp_path / "c.hcore"
    path.write_bytes(data[:length])
    expected = BadMagic if length < 8 else TruncatedFile
    with pytest.raises(expected):
        open_(path, trust)


@pytest.mark.parametrize("nbytes", [1, 2, 3, 4, 5, 17, 1000, 4095, 4096])
def test_appended_bytes(tmp_path, trust, nbytes):
    path = tmp_path / "c.hcore"
    path.write_bytes((GOLDEN / FORMATS["payload"]).read_bytes() + random_bytes(nbytes, nbytes))
    with pytest.raises(LayoutGap, match=f"{nbytes} bytes after the body"):
        open_(path, trust)


def test_bytes_between_resources(tmp_path, trust):
    path = tmp_path / "c.hcore"
    path.write_bytes((GOLDEN / FORMATS["payload"]).read_bytes())

    def shift(body):
        body.locations.locations[2].offset += 1

    data = path.read_bytes()
    offset = struct.unpack_from("<Q", data, 8)[0]
    rewrite_body(path, shift, region=data[24:offset] + b"!")
    with pytest.raises(LayoutGap, match="1 bytes before resource 'chat_template'"):
        open_(path, trust)


# --- alterations signed by the trusted key: the one-frame rules -------------------------------


FRAME = encode_resource(random_bytes(50_000, 5))


@pytest.mark.parametrize(
    ("stored", "decoded", "error", "match"),
    [
        (FRAME + encode_resource(b"second"), 50_000, ExtraFrame, "a second zstd frame"),
        (FRAME + skippable_frame(), 50_000, SkippableFrame, "skippable"),
        (skippable_frame() + FRAME, 50_000, SkippableFrame, "skippable"),
        (b"\x00\x01\x02\x03" + FRAME, 50_000, NotAZstdFrame, "magic"),
        (FRAME[:-1], 50_000, TruncatedFrame, "ends before its last block|needs"),  # signed stored length - 1
        (FRAME + b"\x00", 50_000, TrailingBytes, "1 bytes after the end of the frame"),  # signed stored length + 1
        (FRAME, 50_001, DecodedLengthMismatch, "declares 50000 decoded bytes, the signed decoded length is 50001"),
        (FRAME, 49_999, DecodedLengthMismatch, "declares 50000"),
        (FRAME[: len(FRAME) // 2], 50_000, TruncatedFrame, "needs|before its last block"),
        (FRAME[:3], 50_000, TruncatedFrame, "cannot hold"),
        (b"", 0, TruncatedFrame, "cannot hold"),
        (raw_frame(b"w" * 1000, window_log=24), 1000, WindowTooLarge, "16777216 bytes, the limit is 8388608"),
        (raw_frame(b"w" * 1000, window_log=None, content_nbytes=9 << 20), 1000, WindowTooLarge, "limit"),
        (raw_frame(b"w" * 1000, window_log=20, fcs_nbytes=0), 1000, MissingContentSize, "content size"),
        (raw_frame(b"w" * 1000, window_log=20, content_nbytes=1 << 44), 1000, DecodedLengthMismatch,
         "declares 17592186044416 decoded bytes"),
        (raw_frame(b"w" * 1000, dictionary_id=7), 1000, DictionaryNotAllowed, "dictionary"),
        (raw_frame(b"w" * 1000, reserved_bit=True), 1000, FrameHeaderInvalid, "reserved bit"),
        (raw_frame(b"w" * 1000)[:-1] + b"", 1000, TruncatedFrame, "needs"),
    ],
    ids=["second-frame", "skippable-after", "skippable-before", "not-zstd", "stored-minus-1", "stored-plus-1",
         "decoded-plus-1", "decoded-minus-1", "half-frame", "3-bytes", "empty", "window-16MiB",
         "single-segment-9MiB", "no-content-size", "claims-2^44", "dictionary", "reserved-bit", "raw-cut"],
)
def test_signed_frame_violations(tmp_path, trust, decoder_spy, stored, decoded, error, match):
    path = forge(tmp_path / "c.hcore", [("w", stored, decoded)])
    read_rejected(path, trust, "w", error, match=match)
    assert decoder_spy == []


@pytest.mark.parametrize("nbytes", [1, 2, 3, 4, 5, 100, 4095, 4096])
def test_signed_trailing_garbage(tmp_path, trust, decoder_spy, nbytes):
    tail = b"\x01" + random_bytes(nbytes - 1, nbytes)  # never a frame magic
    path = forge(tmp_path / "c.hcore", [("w", FRAME + tail, 50_000)])
    read_rejected(path, trust, "w", TrailingBytes, match=f"{nbytes} bytes after the end of the frame")
    assert decoder_spy == []


def test_frames_at_the_window_limit_are_accepted(tmp_path, trust):
    data = random_bytes(300_000, 6)
    path = forge(tmp_path / "c.hcore", [("w", raw_frame(data, window_log=23), len(data))])
    with open_(path, trust) as core:
        assert core.read("w") == data


def test_header_claiming_2_to_the_44_is_never_allocated(tmp_path, trust):
    claim = 1 << 44
    path = forge(tmp_path / "c.hcore", [("w", raw_frame(b"w" * 1000, window_log=20, content_nbytes=claim), claim)])
    with open_(path, trust) as core, pytest.raises((FrameCorrupt, TruncatedFrame)):
        core.verify("w")  # decodes into a bounded scratch buffer; the claim is never allocated


def test_corrupt_compressed_block(tmp_path, trust):
    frame = bytearray(encode_resource(b"abcdefgh" * 20_000 + random_bytes(5000, 9)))
    # NOTE: this frame is a 6-byte header, a 16-byte compressed block (header at 9) and a last
    # compressed block; the bytes overwritten lie inside the first block's content.
    assert frame[9] >> 1 & 3 == 2 and int.from_bytes(frame[9:12], "little") >> 3 == 16
    frame[14:22] = b"\xff" * 8
    path = forge(tmp_path / "c.hcore", [("w", bytes(frame), 165_000)])
    read_rejected(path, trust, "w", FrameCorrupt, match="zstd rejected the frame")


def test_python_zstandard_facts_that_the_checks_rely_on():
    """The library behaviour the issue warns about, checked so a change is noticed.

    Measured with python-zstandard 0.25: neither the one-shot `decompress()` nor `stream_reader()`
    enforces `max_window_size` on a frame that declares its content size (only `decompressobj()`
    does), and `decompressobj()` returns quietly on a truncated frame. Hence `check_frame` parses
    the window and walks the blocks itself before anything is decoded.
    """
    data = b"w" * (9 << 20)
    frame = raw_frame(data, window_log=24)
    assert len(zstandard.ZstdDecompressor(max_window_size=8 << 20).decompress(frame)) == len(data)
    assert len(zstandard.ZstdDecompressor(max_window_size=8 << 20).stream_reader(frame).read(len(data) + 1)) == len(data)
    with pytest.raises(zstandard.ZstdError, match="too much memory"):
        zstandard.ZstdDecompressor(max_window_size=8 << 20).decompressobj().decompress(frame)
    decompressor = zstandard.ZstdDecompressor().decompressobj()
    decompressor.decompress(FRAME[: len(FRAME) // 2])
    assert not decompressor.eof  # truncated, and no error


# --- version 4 through the core -----------------------------------------------------------------

C = 64  # plaintext bytes per sealed chunk in these tests


def _v4(tmp_path, stored: bytes, decoded: int):
    from helios.core.keys import protection_key_id

    return forge(tmp_path / "v4.hcore", [("w", stored, decoded)], format="index-v4", encrypted_chunk_nbytes=C,
                 protection_key_id=protection_key_id(PROTECTION_KEY))


def _records(stored: bytes) -> tuple[bytes, list[bytes]]:
    body = stored[SALT_NBYTES:]
    return stored[:SALT_NBYTES], [body[i : i + C + TAG_NBYTES] for i in range(0, len(body), C + TAG_NBYTES)]


PLAIN = random_bytes(3 * C, 21)
SEALED = seal_resource(PLAIN, "w", PROTECTION_KEY, C)


def test_v4_untrusted_flip_is_a_digest_mismatch(tmp_path, trust, decoder_spy):
    path = _v4(tmp_path, SEALED, len(PLAIN))
    with open_(path, trust) as core:
        offset = core.placement("w").offset
    for position in (0, SALT_NBYTES + 3, len(SEALED) - 1):
        path = _v4(tmp_path, SEALED, len(PLAIN))
        flip(path, offset + position, 0x10)
        read_rejected(path, trust, "w", ChunkDigestMismatch)
    assert decoder_spy == []


def test_v4_signed_stream_violations(tmp_path, trust):
    salt, records = _records(SEALED)
    cases = [
        (salt + records[1] + records[0] + records[2], 3 * C, ChunkAuthenticationFailed),  # swapped
        (salt + records[0] + records[0] + records[2], 3 * C, ChunkAuthenticationFailed),  # duplicated
        (salt + records[0] + records[1], 2 * C, MissingFinalChunk),  # final chunk removed
        (salt + records[0] + records[2], 2 * C, ChunkAuthenticationFailed),  # middle chunk removed
        (bytes([salt[0] ^ 1]) + salt[1:] + b"".join(records), 3 * C, ChunkAuthenticationFailed),  # salt
    ]
    one = seal_resource(PLAIN[:C], "w", PROTECTION_KEY, C)
    cases.append((one + _records(one)[1][0], 2 * C, BytesAfterFinalChunk))  # a chunk after the final one
    for stored, decoded, error in cases:
        path = _v4(tmp_path, stored, decoded)
        read_rejected(path, trust, "w", error)


def test_v4_keys(tmp_path, trust, monkeypatch):
    path = _v4(tmp_path, SEALED, len(PLAIN))
    monkeypatch.delenv("HELIOS_PROTECTION_KEY_FILE", raising=False)
    with pytest.raises(ProtectionKeyMissing, match="HELIOS_PROTECTION_KEY_FILE"):
        open_core(path, trusted_keys=trust, accept=PUBLISHER)
    with pytest.raises(ProtectionKeyMismatch):
        open_core(path, trusted_keys=trust, accept=PUBLISHER, protection_key=bytes(32))
    key_file = tmp_path / "aes.key"
    key_file.write_text(PROTECTION_KEY.hex() + "\n")
    monkeypatch.setenv("HELIOS_PROTECTION_KEY_FILE", str(key_file))
    with open_core(path, trusted_keys=trust, accept=PUBLISHER) as core:
        assert core.read("w") == PLAIN


def test_v4_stored_length_must_match_the_decoded_length(tmp_path):
    # The writer applies the reader's envelope rules, so even the key holder cannot sign this.
    with pytest.raises(EnvelopeInvalid, match="257 stored bytes cannot seal 192 decoded bytes"):
        _v4(tmp_path, SEALED + b"x", len(PLAIN))
