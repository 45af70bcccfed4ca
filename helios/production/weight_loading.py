"""Loading a rank's weights (device side): weight resources become device tensors, several at once.

An opened core (`helios.core.Core`) verifies and decodes several resources at once on its decoding
threads (`Core.read_each_into`: zstd and hashlib release the GIL), each one straight into its final
place, and hands each one over only once all its bytes verified:

  CPU   the weight tensor's own storage: no copy at all;
  GPU   a pinned host staging buffer, copied to the device tensor asynchronously as soon as it is
        handed over; the staging buffer is dropped once its copy completed (a CUDA event says so),
        so pinned memory stays at the resources in flight plus the copies not yet done.

The largest resources start first, so that the longest decodes overlap the rest. Any other core
(a `PreparedCore`: `.read(id)` alone) is read one resource at a time, as bytes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import torch

from helios.core.source import CoreSource
from helios.errors import HeliosError
from helios.production.buffers import WeightSizeMismatch, torch_dtype, weight_tensor


class WeightDeclarationInvalid(HeliosError):
    """A program declares a weight tensor with an impossible shape."""


@dataclass(frozen=True, slots=True)
class WeightDeclaration:
    """One weight tensor a program binds to a core resource."""

    resource: str  # resource id in the core
    dtype: int  # manifest_pb2 DType of the stored little-endian elements
    shape: tuple[int, ...]  # tensor shape

    def __post_init__(self) -> None:
        if not self.resource:
            raise WeightDeclarationInvalid("a weight declaration names no resource")
        if any(extent < 0 for extent in self.shape):
            raise WeightDeclarationInvalid(f"weight {self.resource!r}: negative extent in shape {list(self.shape)}")


def load_weights(core: CoreSource, declarations: Iterable[WeightDeclaration], device: torch.device,
                 into: dict[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
    """The device tensor of each declared resource (the first declaration of a resource wins), added
    to `into` (default: a new dict); resources already in `into` are not read again."""
    weights = {} if into is None else into
    wanted: dict[str, WeightDeclaration] = {}
    for declaration in declarations:
        if declaration.resource not in weights:
            wanted.setdefault(declaration.resource, declaration)
    if not wanted:
        return weights
    if not hasattr(core, "read_each_into"):
        for resource, declaration in wanted.items():
            weights[resource] = weight_tensor(core.read(resource), declaration.dtype, declaration.shape, device,
                                              f"weight {resource!r}")
        return weights
    tensors = {resource: _empty(core, declaration, device) for resource, declaration in wanted.items()}
    order = sorted(tensors, key=lambda resource: -_nbytes(tensors[resource]))
    if device.type == "cpu":
        for _ in core.read_each_into(order, lambda resource: _bytes_of(tensors[resource])):
            pass
    else:
        _read_staged(core, order, tensors, device)
    weights.update(tensors)
    return weights


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _bytes_of(tensor: torch.Tensor) -> memoryview:
    """A writable byte view of a contiguous CPU tensor's storage."""
    return memoryview(tensor.view(-1).view(torch.uint8).numpy())


def _empty(core: CoreSource, declaration: WeightDeclaration, device: torch.device) -> torch.Tensor:
    where = f"weight {declaration.resource!r}"
    dtype = torch_dtype(declaration.dtype, where)
    element = torch.empty((), dtype=dtype).element_size()
    expected = int(np.prod(declaration.shape, dtype=np.int64)) * element
    stored = core.resources[declaration.resource].decoded_nbytes if declaration.resource in core.resources else None
    if stored is not None and stored != expected:
        raise WeightSizeMismatch(f"{where}: {stored} bytes, the tensor {list(declaration.shape)} needs {expected}")
    return torch.empty(declaration.shape, dtype=dtype, device=device)


def _read_staged(core: CoreSource, order: list[str], tensors: dict[str, torch.Tensor], device: torch.device) -> None:
    staged: dict[str, torch.Tensor] = {}
    copying: deque[tuple[torch.cuda.Event, torch.Tensor]] = deque()

    def stage(resource: str) -> memoryview:
        host = torch.empty(_nbytes(tensors[resource]), dtype=torch.uint8, pin_memory=True)
        staged[resource] = host
        return memoryview(host.numpy())

    stream = torch.cuda.current_stream(device)
    for resource, _ in core.read_each_into(order, stage):
        host = staged.pop(resource)
        tensors[resource].view(-1).view(torch.uint8).copy_(host, non_blocking=True)
        done = torch.cuda.Event()
        done.record(stream)
        copying.append((done, host))
        while copying and copying[0][0].query():
            copying.popleft()
    for done, _ in copying:
        done.synchronize()
