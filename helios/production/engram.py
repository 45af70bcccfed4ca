"""Engram tables in production (device side): each table's host gatherer over its two host staging
frames, and the copies that move a filled frame and the row index to the device (docs/engram.md).

The table itself stays in host memory (`helios.runtime.engram.load_engram_tables`): no program
declares it, so weight loading never uploads it. The device holds the table's TRANSPORT staging
buffer [2, S, W] (its two frames) and row index [R, O]. On a GPU (and in the GPU-paths mode) each
has a host staging tensor of its own, pinned on a GPU; a fill writes host frame f and the row index
and enqueues their copies into device frame f and the device row index on the serving stream,
asynchronously: host frame f is read by that copy after `fill` returns, which is why a frame is
reused only once the round that consumes it has been collected (its completion fenced). On a CPU
without separate staging the host frames are the device buffer itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch

from helios.core.source import CoreSource
from helios.runtime.engram import EngramGatherer, load_engram_tables


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    """A NumPy view of a host tensor (bf16 as its raw 16-bit patterns)."""
    return (tensor.view(torch.int16) if tensor.dtype == torch.bfloat16 else tensor).numpy()


def engram_gatherers(core: CoreSource, buffers: Mapping[str, torch.Tensor], *,
                     separate: bool, pinned: bool) -> tuple[EngramGatherer, ...]:
    """One gatherer per Engram table of `core`, over its two staging frames (see the module docstring)."""
    serving, manifest = core.contract, core.manifest
    gatherers = []
    for table, values in load_engram_tables(serving, manifest, core.read, raw_bf16=True):
        staging, row_index = buffers[table.staging], buffers[table.row_index]
        upload: Callable[[int], None] | None = None
        if separate:
            host_staging = torch.zeros(staging.shape, dtype=staging.dtype, pin_memory=pinned)
            host_index = torch.full(row_index.shape, -1, dtype=row_index.dtype, pin_memory=pinned)

            def upload(frame: int, staging=staging, row_index=row_index, host_staging=host_staging,
                       host_index=host_index) -> None:
                staging[frame].copy_(host_staging[frame], non_blocking=True)
                row_index.copy_(host_index, non_blocking=True)
        else:
            host_staging, host_index = staging, row_index
        gatherers.append(EngramGatherer(table, values, _numpy(host_staging), _numpy(host_index), upload=upload))
    return tuple(gatherers)
