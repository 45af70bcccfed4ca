"""The safetensors format, read directly (preparation side, host; NumPy only).

Owns parsing safetensors files (8-byte little-endian header length, a JSON header of dtype, shape and
data offsets per tensor, then raw little-endian bytes), single-file or sharded through
`model.safetensors.index.json`, and exact bf16 conversion (bf16 is kept as uint16 bit patterns until
widened). Every tensor's byte range is checked against its shape and the file before it is read.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from helios.ignition.errors import MalformedCheckpointFile, MissingCheckpointFile, UnsupportedCheckpoint

# safetensors dtype strings -> (NumPy storage dtype, element size). bf16 is stored as uint16 bits.
_SAFETENSORS_DTYPES: dict[str, tuple[np.dtype, int]] = {
    "F32": (np.dtype("<f4"), 4),
    "F16": (np.dtype("<f2"), 2),
    "BF16": (np.dtype("<u2"), 2),
    "F64": (np.dtype("<f8"), 8),
    "I64": (np.dtype("<i8"), 8),
    "I32": (np.dtype("<i4"), 4),
    "I16": (np.dtype("<i2"), 2),
    "I8": (np.dtype("i1"), 1),
    "U8": (np.dtype("u1"), 1),
    "BOOL": (np.dtype("?"), 1),
}

_HEADER_LIMIT = 100 * 1024 * 1024  # the safetensors reference implementation's own cap


def bf16_bits_to_float32(bits: np.ndarray) -> np.ndarray:
    """Exact widening of bf16 bit patterns (uint16) to float32."""
    return (bits.astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16_bits(values: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even narrowing of float32 to bf16 bit patterns (uint16); NaN stays NaN."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> 16) & 1) + np.uint32(0x7FFF)
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(values)
    if nan.any():
        rounded = np.where(nan, np.uint16(0x7FC0), rounded)
    return rounded


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """Where one stored tensor lies: file, safetensors dtype, shape and byte range."""

    name: str
    file: Path
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: tuple[int, ...]
    begin: int  # absolute byte offset in `file`
    end: int

    def __post_init__(self) -> None:
        if self.dtype not in _SAFETENSORS_DTYPES:
            raise UnsupportedCheckpoint(f"{self.file.name}: tensor {self.name} has dtype {self.dtype}")
        count = int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1
        if count * _SAFETENSORS_DTYPES[self.dtype][1] != self.end - self.begin:
            raise MalformedCheckpointFile(
                f"{self.file.name}: tensor {self.name} spans {self.end - self.begin} bytes, "
                f"its shape {list(self.shape)} and dtype {self.dtype} need {count * _SAFETENSORS_DTYPES[self.dtype][1]}"
            )


class TensorStore:
    """The checkpoint's stored tensors by name, read lazily from memory-mapped safetensors files."""

    def __init__(self, infos: Mapping[str, TensorInfo]) -> None:
        self._infos = dict(sorted(infos.items()))
        self._maps: dict[Path, np.memmap] = {}

    def __contains__(self, name: object) -> bool:
        return name in self._infos

    def __iter__(self) -> Iterator[str]:
        return iter(self._infos)

    def __len__(self) -> int:
        return len(self._infos)

    def info(self, name: str) -> TensorInfo:
        try:
            return self._infos[name]
        except KeyError:
            raise MissingCheckpointFile(f"checkpoint has no tensor {name}") from None

    def raw(self, name: str) -> np.ndarray:
        """The stored values (bf16 as uint16 bits), a read-only view of the mapped file."""
        info = self.info(name)
        if info.file not in self._maps:
            self._maps[info.file] = np.memmap(info.file, dtype=np.uint8, mode="r")
        storage, _ = _SAFETENSORS_DTYPES[info.dtype]
        return self._maps[info.file][info.begin : info.end].view(storage).reshape(info.shape)

    def float32(self, name: str) -> np.ndarray:
        """The tensor widened to float32 (exact for bf16, f16 and f32)."""
        info = self.info(name)
        values = self.raw(name)
        if info.dtype == "BF16":
            return bf16_bits_to_float32(values)
        if info.dtype in ("F32", "F16", "F64"):
            return values.astype(np.float32)
        raise UnsupportedCheckpoint(f"tensor {name} has non-float dtype {info.dtype}")


def read_json(path: Path, *, required: bool) -> dict[str, Any] | None:
    """A JSON object file of the checkpoint (None when absent and not required)."""
    if not path.is_file():
        if required:
            raise MissingCheckpointFile(f"{path.name} is missing from the checkpoint directory")
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedCheckpointFile(f"{path.name} is not valid JSON: {error}") from None
    if not isinstance(value, dict):
        raise MalformedCheckpointFile(f"{path.name} must hold a JSON object")
    return value


def _read_safetensors_header(path: Path) -> dict[str, TensorInfo]:
    with path.open("rb") as handle:
        prefix = handle.read(8)
        if len(prefix) != 8:
            raise MalformedCheckpointFile(f"{path.name}: shorter than the 8-byte header length")
        (length,) = struct.unpack("<Q", prefix)
        if length > _HEADER_LIMIT:
            raise MalformedCheckpointFile(f"{path.name}: header length {length} exceeds {_HEADER_LIMIT}")
        raw = handle.read(length)
    if len(raw) != length:
        raise MalformedCheckpointFile(f"{path.name}: header truncated ({len(raw)} of {length} bytes)")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise MalformedCheckpointFile(f"{path.name}: header is not JSON: {error}") from None
    size = path.stat().st_size
    base = 8 + length
    infos: dict[str, TensorInfo] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(v) for v in entry["data_offsets"])
            info = TensorInfo(name, path, str(entry["dtype"]), tuple(int(d) for d in entry["shape"]),
                              base + begin, base + end)
        except (KeyError, TypeError, ValueError) as error:
            raise MalformedCheckpointFile(f"{path.name}: tensor {name} has a malformed entry ({error})") from None
        if info.end > size:
            raise MalformedCheckpointFile(f"{path.name}: tensor {name} ends past the end of the file")
        infos[name] = info
    return infos


def read_tensors(directory: Path) -> TensorStore:
    """Every tensor of the directory's safetensors file(s), by name."""
    index = read_json(directory / "model.safetensors.index.json", required=False)
    if index is not None:
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            raise MalformedCheckpointFile("model.safetensors.index.json has no weight_map object")
        files = sorted(set(weight_map.values()))
    else:
        files = sorted(p.name for p in directory.glob("*.safetensors"))
        if not files:
            raise MissingCheckpointFile("no *.safetensors weights in the checkpoint directory")
    infos: dict[str, TensorInfo] = {}
    for name in files:
        path = directory / name
        if not path.is_file():
            raise MissingCheckpointFile(f"{name} (named by the safetensors index) is missing")
        for tensor, info in _read_safetensors_header(path).items():
            if tensor in infos:
                raise MalformedCheckpointFile(f"tensor {tensor} is stored in two shards")
            infos[tensor] = info
    if index is not None:
        for tensor, shard in index["weight_map"].items():
            if tensor not in infos or infos[tensor].file.name != shard:
                raise MalformedCheckpointFile(f"model.safetensors.index.json places {tensor} in {shard}, which lacks it")
    return TensorStore(infos)
