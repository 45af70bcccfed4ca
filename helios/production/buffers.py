"""Static device buffers (device side): the manifest's buffers, the weights of a rank, and the scratch
arena every launch plan draws from.

Nothing here allocates after startup. `ScratchArena` hands out scratch tensors by (dtype, shape):
within one program a tensor returns to the arena after its last reader, so layer after layer reuses
the same storage; across programs the arena is reset, so graphs (which never run concurrently: one
stream, one submission at a time) share it and scratch memory is the largest single program's need,
not the sum. Samplers and attention split buffers are memoized by shape the same way.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Iterable

import numpy as np
import torch

from helios.errors import HeliosError
from helios.proto import manifest_pb2

M = manifest_pb2

TORCH_DTYPES: dict[int, torch.dtype] = {
    M.DTYPE_F32: torch.float32,
    M.DTYPE_BF16: torch.bfloat16,
    M.DTYPE_F16: torch.float16,
    M.DTYPE_I32: torch.int32,
    M.DTYPE_I64: torch.int64,
    M.DTYPE_U8: torch.uint8,
    M.DTYPE_U32: torch.uint32,
    M.DTYPE_F64: torch.float64,
}
# Raw little-endian storage of each dtype as the core holds weight bytes.
_RAW_DTYPES: dict[int, torch.dtype] = {**TORCH_DTYPES}


class WeightSizeMismatch(HeliosError):
    """A weight resource holds a different number of bytes than its program tensor declares."""


class UnsupportedDType(HeliosError):
    """A tensor's dtype has no device representation."""


def torch_dtype(dtype: int, where: str) -> torch.dtype:
    if dtype not in TORCH_DTYPES:
        raise UnsupportedDType(f"{where}: dtype {dtype} has no device representation")
    return TORCH_DTYPES[dtype]


def weight_tensor(data: bytes, dtype: int, shape: Iterable[int], device: torch.device, where: str) -> torch.Tensor:
    """The device tensor of one weight resource's bytes (one host-to-device copy, no conversion)."""
    shape = tuple(int(e) for e in shape)
    element = torch.empty((), dtype=torch_dtype(dtype, where)).element_size()
    expected = int(np.prod(shape, dtype=np.int64)) * element
    if len(data) != expected:
        raise WeightSizeMismatch(f"{where}: {len(data)} bytes, the tensor {list(shape)} needs {expected}")
    if device.type != "cpu":
        with warnings.catch_warnings():
            # NOTE: read-only bytes are fine here: the host view lives only until the device copy.
            warnings.filterwarnings("ignore", message="The given buffer is not writable")
            return torch.frombuffer(data, dtype=_RAW_DTYPES[dtype]).reshape(shape).to(device)
    return torch.frombuffer(bytearray(data), dtype=_RAW_DTYPES[dtype]).reshape(shape)


def manifest_buffers(manifest: manifest_pb2.ExecutionManifest, device: torch.device, *, pages: int,
                     names: Iterable[str] | None = None) -> dict[str, torch.Tensor]:
    """One zeroed device tensor per manifest buffer (CACHE buffers with `pages` leading pages)."""
    wanted = None if names is None else set(names)
    out: dict[str, torch.Tensor] = {}
    for b in manifest.buffers:
        if wanted is not None and b.name not in wanted:
            continue
        shape = [int(e) for e in b.shape]
        if b.role == M.BUFFER_ROLE_CACHE:
            shape[0] = pages
        out[b.name] = torch.zeros(shape, dtype=torch_dtype(b.dtype, f"buffer {b.name}"), device=device)
    return out


class ScratchArena:
    """Scratch storage shared by every launch plan of one device (see the module docstring)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._all: dict[tuple[torch.dtype, tuple[int, ...]], list[torch.Tensor]] = defaultdict(list)
        self._free: dict[tuple[torch.dtype, tuple[int, ...]], list[torch.Tensor]] = defaultdict(list)
        self._memo: dict[tuple, object] = {}

    def reset(self) -> None:
        """Every scratch tensor is free again: the next program may reuse all of them."""
        self._free = defaultdict(list, {key: list(tensors) for key, tensors in self._all.items()})

    def acquire(self, dtype: torch.dtype, shape: tuple[int, ...]) -> torch.Tensor:
        key = (dtype, tuple(shape))
        if self._free[key]:
            return self._free[key].pop()
        # zeroed once: startup runs every plan before any transport is filled (kernel discovery skips
        # the Triton launches but runs the torch ops), so nothing there may read leftover memory
        tensor = torch.zeros(shape, dtype=dtype, device=self.device)
        self._all[key].append(tensor)
        return tensor

    def release(self, tensor: torch.Tensor) -> None:
        self._free[(tensor.dtype, tuple(tensor.shape))].append(tensor)

    def memo(self, key: tuple, make):
        """One object per key (a sampler, split buffers), made once and shared by every plan."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    @property
    def bytes(self) -> int:
        total = sum(t.numel() * t.element_size() for ts in self._all.values() for t in ts)
        return total
