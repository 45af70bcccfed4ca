"""The byte layout of a core file (host side): header, resource region, CoreBody, LocationSet tiling.

    [0, 8)                 magic 89 48 43 4F 52 45 0D 0A ("\\x89HCORE\\r\\n")
    [8, 16)                body_offset, u64 little-endian
    [16, 24)               body_nbytes, u64 little-endian
    [24, body_offset)      resource region: stored resource bytes, back to back
    [body_offset, EOF)     CoreBody, canonical (deterministic) Protobuf; EOF == body_offset + body_nbytes

The LocationSet (unsigned, inside CoreBody) places each signed resource exactly once, at a range of
this file (`file` empty) or of a sibling file in the same directory. Every byte is accounted for:
in-file ranges tile the resource region exactly and each sibling file exactly, with no gap, no
overlap and nothing after the last range (safetensors' rule against polyglot files).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from dataclasses import dataclass

from google.protobuf.message import DecodeError

from helios.core.errors import (
    BadMagic,
    BodyMalformed,
    BodyTooLarge,
    LayoutGap,
    LayoutOverlap,
    LocationInvalid,
    SiblingFileInvalid,
    TruncatedFile,
)
from helios.proto import core_pb2

MAGIC = b"\x89HCORE\r\n"
HEADER_NBYTES = 24
MAX_BODY_NBYTES = 256 << 20


def encode_header(body_offset: int, body_nbytes: int) -> bytes:
    return MAGIC + struct.pack("<QQ", body_offset, body_nbytes)


@dataclass(frozen=True, slots=True)
class Container:
    """A core file's header and its parsed, canonical CoreBody."""

    file_nbytes: int  # size of the core file
    body_offset: int  # first byte of the CoreBody
    body: core_pb2.CoreBody

    def __post_init__(self) -> None:
        if not HEADER_NBYTES <= self.body_offset <= self.file_nbytes:
            raise ValueError(f"body offset {self.body_offset} outside [{HEADER_NBYTES}, {self.file_nbytes}]")


def read_container(fd: int) -> Container:
    """Reads and checks the header and the CoreBody of an open core file."""
    file_nbytes = os.fstat(fd).st_size
    header = os.pread(fd, HEADER_NBYTES, 0)
    if len(header) < len(MAGIC) or header[: len(MAGIC)] != MAGIC:
        raise BadMagic(f"file offset 0: the file does not start with the core magic {MAGIC!r}")
    if len(header) < HEADER_NBYTES:
        raise TruncatedFile(f"file offset {len(header)}: the file ends inside its {HEADER_NBYTES}-byte header")
    body_offset, body_nbytes = struct.unpack_from("<QQ", header, len(MAGIC))
    if body_offset < HEADER_NBYTES:
        raise LayoutOverlap(f"file offset 8: the body offset {body_offset} lies inside the header")
    if body_nbytes > MAX_BODY_NBYTES:
        raise BodyTooLarge(f"file offset 16: a body of {body_nbytes} bytes exceeds the {MAX_BODY_NBYTES}-byte limit")
    end = body_offset + body_nbytes
    if end > file_nbytes:
        raise TruncatedFile(f"file offset {file_nbytes}: the body [{body_offset}, {end}) runs past the end of the file")
    if end < file_nbytes:
        raise LayoutGap(f"file offset {end}: {file_nbytes - end} bytes after the body belong to nothing")
    raw = os.pread(fd, body_nbytes, body_offset)
    body = core_pb2.CoreBody()
    try:
        body.ParseFromString(raw)
    except DecodeError as error:
        raise BodyMalformed(f"file offset {body_offset}: the CoreBody does not parse: {error}") from None
    # NOTE: Protobuf has many encodings of one message. The unsigned body must be the one canonical
    # encoding, so that no byte of it can change (reordered fields, unknown fields, padding varints)
    # without the change being seen.
    if body.SerializeToString(deterministic=True) != raw:
        raise BodyMalformed(
            f"file offset {body_offset}: the CoreBody is not canonically encoded "
            f"(unknown, repeated or reordered fields)"
        )
    return Container(file_nbytes, body_offset, body)


def write_body(file, body: core_pb2.CoreBody, body_offset: int) -> None:
    """Appends the canonical CoreBody at `body_offset` (the current end) and patches the header."""
    raw = body.SerializeToString(deterministic=True)
    if len(raw) > MAX_BODY_NBYTES:
        raise BodyTooLarge(f"a body of {len(raw)} bytes exceeds the {MAX_BODY_NBYTES}-byte limit")
    file.seek(body_offset)
    file.write(raw)
    file.truncate()
    file.seek(0)
    file.write(encode_header(body_offset, len(raw)))


def check_sibling_name(name: str, resource_id: str) -> None:
    """Refuses a sibling file name that is not a plain file name in the core's directory."""
    if name in (".", "..") or "/" in name or "\\" in name or "\0" in name or name != name.strip():
        raise SiblingFileInvalid(
            f"resource {resource_id!r}: sibling file name {name!r} is not a plain file name in the core's directory"
        )


def sibling_names(body: core_pb2.CoreBody) -> list[str]:
    """The sibling files the LocationSet names, each once, in order; unsafe names are refused."""
    names: list[str] = []
    for location in body.locations.locations:
        if location.file and location.file not in names:
            check_sibling_name(location.file, location.resource_id)
            names.append(location.file)
    return names


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one resource's stored bytes lie."""

    file: str  # "" for the core file, else a sibling file name
    offset: int  # first stored byte in that file
    nbytes: int  # stored length (equals the signed stored length)

    def __post_init__(self) -> None:
        if self.offset < 0 or self.nbytes < 0:
            raise ValueError(f"negative placement {self}")


def check_locations(
    container: Container, stored_nbytes: Mapping[str, int], sibling_nbytes: Mapping[str, int]
) -> dict[str, Placement]:
    """Checks that the LocationSet places every signed resource exactly once and tiles every file.

    `stored_nbytes` maps each signed resource id (in envelope order) to its signed stored length;
    `sibling_nbytes` gives the size of each sibling file that `sibling_names` returned.
    """
    placements: dict[str, Placement] = {}
    for location in container.body.locations.locations:
        rid = location.resource_id
        if rid not in stored_nbytes:
            raise LocationInvalid(f"the LocationSet places {rid!r}, which the signed envelope does not name")
        if rid in placements:
            raise LocationInvalid(f"the LocationSet places resource {rid!r} twice")
        if location.nbytes != stored_nbytes[rid]:
            raise LocationInvalid(
                f"resource {rid!r} at file offset {location.offset}: the LocationSet gives {location.nbytes} "
                f"bytes, the signed stored length is {stored_nbytes[rid]}"
            )
        placements[rid] = Placement(location.file, location.offset, location.nbytes)
    missing = [rid for rid in stored_nbytes if rid not in placements]
    if missing:
        raise LocationInvalid(f"the LocationSet does not place resource {missing[0]!r}")
    files: dict[str, list[tuple[int, int, str]]] = {}
    for rid, placement in placements.items():
        files.setdefault(placement.file, []).append((placement.offset, placement.nbytes, rid))
    _tile("", files.get("", []), HEADER_NBYTES, container.body_offset)
    for name, ranges in files.items():
        if name:
            _tile(name, ranges, 0, sibling_nbytes[name])
    return placements


def _tile(name: str, ranges: list[tuple[int, int, str]], start: int, end: int) -> None:
    label = f" of sibling {name!r}" if name else ""
    cursor = start
    for offset, nbytes, rid in sorted(ranges):
        if offset > cursor:
            raise LayoutGap(f"file offset {cursor}{label}: {offset - cursor} bytes before resource {rid!r} belong to nothing")
        if offset < cursor:
            raise LayoutOverlap(f"resource {rid!r} at file offset {offset}{label} overlaps the bytes before it")
        cursor = offset + nbytes
    if cursor > end:
        where = "the body" if not name else "the end of the file"
        raise LayoutOverlap(f"file offset {end}{label}: resource bytes run into {where} (to {cursor})")
    if cursor < end:
        raise LayoutGap(f"file offset {cursor}{label}: {end - cursor} bytes before {'the body' if not name else 'the end'} belong to nothing")
