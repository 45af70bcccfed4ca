"""The one-zstd-frame rule of core resources (host side): encode, check the structure, decode.

Encoding is zstd level 3 with the content size in the header and no checksum (the signed chunk
digests are the integrity check). Before any byte is decoded, `check_frame` parses the frame header
and walks the block headers (RFC 8878) to prove that the stored bytes are exactly one frame: the zstd
magic (no skippable frame), no reserved bits, a content size equal to the signed decoded length, a
window of at most 8 MiB, no dictionary, every block present, nothing after the last block.
`decode_into` then decodes into the caller's buffer through zstd's streaming reader, which never
allocates output. NOTE: measured with python-zstandard 0.25, neither the one-shot `decompress()`
nor `stream_reader()` enforces `max_window_size` on a frame that declares its content size, and
`decompressobj()` is silent on truncation; the one-shot call also pre-allocates whatever size the
header claims. So the window, the content size and the frame's extent are checked here, by hand.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import zstandard

from helios.core.errors import (
    DecodedLengthMismatch,
    DictionaryNotAllowed,
    ExtraFrame,
    FrameCorrupt,
    FrameHeaderInvalid,
    MissingContentSize,
    NotAZstdFrame,
    SkippableFrame,
    TrailingBytes,
    TruncatedFrame,
    WindowTooLarge,
)

ZSTD_LEVEL = 3
MAX_WINDOW_NBYTES = 8 << 20
ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MASK = 0xFFFFFFF0
_SKIPPABLE_MAGIC = 0x184D2A50
_BLOCK_RESERVED = 3
_MAX_HEADER_NBYTES = 18  # magic 4 + descriptor 1 + window 1 + dictionary id 4 + content size 8

ReadAt = Callable[[int, int], bytes]
"""read_at(position, nbytes) -> at most nbytes stored bytes from position (relative to the frame start,
never past the resource's stored end)."""


def encode_resource(data: bytes | memoryview) -> bytes:
    """One zstd level-3 frame holding `data`, with its content size and without a checksum."""
    compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, write_content_size=True, write_checksum=False)
    return compressor.compress(data)


@dataclass(frozen=True, slots=True)
class FrameHeader:
    """The parsed header of one zstd frame."""

    header_nbytes: int  # bytes from the magic to the first block header
    content_nbytes: int  # declared decoded size
    window_nbytes: int  # declared window (the content size in single-segment frames)
    has_checksum: bool  # a 4-byte content checksum follows the last block

    def __post_init__(self) -> None:
        if self.header_nbytes < 6 or self.content_nbytes < 0 or self.window_nbytes < 0:
            raise ValueError(f"impossible frame header {self}")


Where = Callable[[int], str]
"""where(position) names the resource and the file offset of a stored position, for error messages."""


def _magic_error(magic: int, where: str, first: bool):
    if magic & _SKIPPABLE_MASK == _SKIPPABLE_MAGIC:
        return SkippableFrame(f"{where}: a skippable frame (magic {magic:#010x}); resources are one zstd frame")
    if first:
        return NotAZstdFrame(f"{where}: magic {magic:#010x} is not the zstd frame magic {ZSTD_MAGIC:#010x}")
    if magic == ZSTD_MAGIC:
        return ExtraFrame(f"{where}: a second zstd frame; a resource is exactly one frame")
    return None


def parse_header(head: bytes, stored_nbytes: int, where_at: Where) -> FrameHeader:
    """Parses the frame header at the start of `head` (the first stored bytes of a resource)."""
    where = where_at(0)  # every header error lies at the frame's first byte
    if len(head) < 4:
        raise TruncatedFrame(f"{where}: {stored_nbytes} stored bytes cannot hold a zstd frame header")
    (magic,) = struct.unpack_from("<I", head)
    if magic != ZSTD_MAGIC:
        raise _magic_error(magic, where, first=True)
    if len(head) < 5:
        raise TruncatedFrame(f"{where}: the frame header is cut after its magic")
    descriptor = head[4]
    fcs_flag, single_segment = descriptor >> 6, (descriptor >> 5) & 1
    has_checksum, dictionary_flag = bool((descriptor >> 2) & 1), descriptor & 3
    if descriptor & 0x08:
        raise FrameHeaderInvalid(f"{where}: the frame header descriptor sets its reserved bit")
    if dictionary_flag:
        raise DictionaryNotAllowed(f"{where}: the frame header names a dictionary (flag {dictionary_flag})")
    fcs_nbytes = (1 if single_segment else 0, 2, 4, 8)[fcs_flag]
    if fcs_nbytes == 0:
        raise MissingContentSize(f"{where}: the frame header does not declare its content size")
    header_nbytes = 5 + (0 if single_segment else 1) + fcs_nbytes
    if len(head) < header_nbytes:
        raise TruncatedFrame(f"{where}: the frame header needs {header_nbytes} bytes, {len(head)} are stored")
    position = 5
    window_nbytes = -1
    if not single_segment:
        window_descriptor = head[position]
        window_log = 10 + (window_descriptor >> 3)
        window_base = 1 << window_log
        window_nbytes = window_base + (window_base >> 3) * (window_descriptor & 7)
        position += 1
    content_nbytes = int.from_bytes(head[position : position + fcs_nbytes], "little")
    if fcs_nbytes == 2:
        content_nbytes += 256
    if single_segment:
        window_nbytes = content_nbytes
    if window_nbytes > MAX_WINDOW_NBYTES:
        raise WindowTooLarge(
            f"{where}: the frame window is {window_nbytes} bytes, the limit is {MAX_WINDOW_NBYTES} (8 MiB)"
        )
    return FrameHeader(header_nbytes, content_nbytes, window_nbytes, has_checksum)


def check_frame(read_at: ReadAt, stored_nbytes: int, decoded_nbytes: int, where: Where) -> None:
    """Proves that the stored bytes are exactly one well-formed zstd frame of `decoded_nbytes`.

    Reads only the frame header and the 3-byte block headers. Raises the specific error for the
    first rule broken; returns only when the frame ends exactly at `stored_nbytes`.
    """
    head = read_at(0, min(stored_nbytes, _MAX_HEADER_NBYTES))
    header = parse_header(head, stored_nbytes, where)
    if header.content_nbytes != decoded_nbytes:
        raise DecodedLengthMismatch(
            f"{where(0)}: the frame header declares {header.content_nbytes} "
            f"decoded bytes, the signed decoded length is {decoded_nbytes}"
        )
    position = header.header_nbytes
    while True:
        block = read_at(position, 3)
        if len(block) < 3:
            raise TruncatedFrame(
                f"{where(position)}: the frame ends before its last block "
                f"({stored_nbytes} stored bytes)"
            )
        value = int.from_bytes(block, "little")
        last, block_type, block_nbytes = value & 1, (value >> 1) & 3, value >> 3
        if block_type == _BLOCK_RESERVED:
            raise FrameHeaderInvalid(f"{where(position)}: a block of reserved type 3")
        position += 3 + (1 if block_type == 1 else block_nbytes)
        if last:
            break
    end = position + (4 if header.has_checksum else 0)
    if end > stored_nbytes:
        raise TruncatedFrame(
            f"{where(stored_nbytes)}: the frame needs {end} bytes, "
            f"{stored_nbytes} are stored"
        )
    if end < stored_nbytes:
        tail = read_at(end, 4)
        if len(tail) == 4:
            error = _magic_error(struct.unpack("<I", tail)[0], where(end), first=False)
            if error is not None:
                raise error
        raise TrailingBytes(
            f"{where(end)}: {stored_nbytes - end} bytes after the end of the frame"
        )


class _Source:
    """Adapts a `read(n)` function to the file-like object zstd's stream reader pulls from."""

    __slots__ = ("read",)

    def __init__(self, read: Callable[[int], bytes]) -> None:
        self.read = read


def decode_into(
    read: Callable[[int], bytes], out: memoryview, decoded_nbytes: int, where: Where, read_nbytes: int
) -> None:
    """Decodes the one frame that `read(n)` yields into `out`.

    `out` has the signed decoded length, or is a smaller scratch buffer that is overwritten again
    and again (to check a resource without keeping it). Call only after `check_frame` and the chunk
    digests passed. The decoder writes straight into `out` and cannot write past it; a frame that
    yields fewer bytes than `decoded_nbytes`, or more, is rejected.
    """
    decompressor = zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW_NBYTES)
    reader = decompressor.stream_reader(_Source(read), read_size=read_nbytes, read_across_frames=False)
    keep = len(out) == decoded_nbytes
    filled = 0
    try:
        while filled < decoded_nbytes:
            target = out[filled:] if keep else out[: min(len(out), decoded_nbytes - filled)]
            n = reader.readinto(target)
            if n == 0:
                break
            filled += n
        extra = reader.readinto(bytearray(1)) if filled == decoded_nbytes else 0
    except zstandard.ZstdError as error:
        raise FrameCorrupt(
            f"{where(0)}: zstd rejected the frame after {filled} decoded bytes: {error}"
        ) from None
    finally:
        reader.close()
    if filled < decoded_nbytes:
        raise TruncatedFrame(
            f"{where(0)}: the frame decoded to {filled} bytes and ended, "
            f"the signed decoded length is {decoded_nbytes}"
        )
    if extra:
        raise DecodedLengthMismatch(
            f"{where(0)}: the frame decodes past the signed decoded length {decoded_nbytes}"
        )
