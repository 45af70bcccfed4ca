"""Helpers for core tests: fixed keys, hand-built zstd frames, forged and rewritten cores."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from helios.core import StoredResource, write_stored_core
from helios.core.layout import encode_header, read_container
from helios.proto import core_pb2

# NOTE: fixed keys keep golden files reproducible; they protect nothing.
SIGNING_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
OTHER_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(1, 33)))
PROTECTION_KEY = bytes(range(100, 132))
PUBLISHER = "acme/models"

WEIGHT = core_pb2.RESOURCE_KIND_WEIGHT
OPAQUE = core_pb2.RESOURCE_KIND_OPAQUE


def random_bytes(nbytes: int, seed: int) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes()


def raw_frame(
    data: bytes,
    *,
    content_nbytes: int | None = None,
    window_log: int | None = 20,
    fcs_nbytes: int = 8,
    dictionary_id: int | None = None,
    reserved_bit: bool = False,
    checksum: bool = False,
) -> bytes:
    """A zstd frame of raw blocks, with a hand-chosen header (window_log None: single segment)."""
    fcs_flag = {0: 0, 1: 0, 2: 1, 4: 2, 8: 3}[fcs_nbytes]
    single = window_log is None
    dict_flag = 0 if dictionary_id is None else 3
    descriptor = (fcs_flag << 6) | (int(single) << 5) | (int(reserved_bit) << 3) | (int(checksum) << 2) | dict_flag
    header = struct.pack("<I", 0xFD2FB528) + bytes([descriptor])
    if not single:
        header += bytes([(window_log - 10) << 3])
    if dictionary_id is not None:
        header += struct.pack("<I", dictionary_id)
    size = len(data) if content_nbytes is None else content_nbytes
    if fcs_nbytes == 2:
        header += struct.pack("<H", size - 256)
    elif fcs_nbytes:
        header += size.to_bytes(fcs_nbytes, "little")
    blocks = b""
    pieces = [data[i : i + (128 << 10)] for i in range(0, len(data), 128 << 10)] or [b""]
    for index, piece in enumerate(pieces):
        last = index == len(pieces) - 1
        blocks += (int(last) | (0 << 1) | (len(piece) << 3)).to_bytes(3, "little") + piece
    return header + blocks + (b"\0\0\0\0" if checksum else b"")


def skippable_frame(payload: bytes = b"hidden") -> bytes:
    return struct.pack("<II", 0x184D2A50, len(payload)) + payload


def forge(path: Path, resources: list[tuple[str, bytes, int]], *, format: str = "payload",
          key: Ed25519PrivateKey = SIGNING_KEY, **extra) -> Path:
    """A core signed by `key` over stored bytes given as is: [(id, stored, signed decoded length)]."""
    write_stored_core(
        path, publisher=PUBLISHER, signing_key=key, deployment=core_pb2.DeploymentBody(),
        resources=[StoredResource(rid, WEIGHT, decoded, stored) for rid, stored, decoded in resources],
        format=format, **extra,
    )
    return path


def rewrite_body(path: Path, mutate, *, region: bytes | None = None) -> None:
    """Rewrites a core's unsigned CoreBody (and optionally its resource region), fixing the header."""
    data = Path(path).read_bytes()
    fd = os.open(path, os.O_RDONLY)
    try:
        container = read_container(fd)
    finally:
        os.close(fd)
    body = core_pb2.CoreBody()
    body.CopyFrom(container.body)
    mutate(body)
    region = data[24 : container.body_offset] if region is None else region
    raw = body.SerializeToString(deterministic=True)
    Path(path).write_bytes(encode_header(24 + len(region), len(raw)) + region + raw)


def flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as file:
        file.seek(offset)
        byte = file.read(1)[0]
        file.seek(offset)
        file.write(bytes([byte ^ mask]))
