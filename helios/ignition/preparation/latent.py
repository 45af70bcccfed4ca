"""Paged latent histories at preparation (preparation side, host; NumPy only): reusable declarations.

- `latent_history`: one layer's PAGED_LATENT region (multi-head latent attention, docs/latent.md):
  two CACHE planes paged like key/value planes, `layer<i>.latent` [pages, T, 1, L] (the compressed
  key/value after its norm) and `layer<i>.rope_key` [pages, T, 1, R] (the rotated key every head
  shares), one record a token (`tokens_per_record` 1: a page of T tokens holds T records of each).
- `HeadRows`: the per-head part of a stored projection a latent layer reads: rows [start, stop) of
  every head's block of a `[heads * block, ...]` tensor, as one matrix (`[heads * (stop - start),
  ...]`, a product's rows) or one matrix per head (`[heads, stop - start, in]`, optionally
  transposed to `[heads, in, stop - start]`: a `head_matmul` weight), its rows optionally
  de-interleaved (each head's selected rows as the even ones, then the odd ones). Weights are
  prepared once in these layouts, so no program slices or permutes a weight.

    HeadRows(heads=4, block=24, start=0, stop=16)                     # q's no-position rows
    HeadRows(heads=4, block=24, start=16, stop=24, deinterleaved=True)  # q's rotary rows, rotate-half order
    HeadRows(heads=4, block=32, start=0, stop=16, split=True, transposed=True)  # W_uk^T per head [4, L, 16]

It keeps `WeightPart`'s protocol (resource id, catalog transform, shape, apply), so preparation
stores and catalogs it as it does a rank's slice.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from helios.ignition.preparation.contract import Declarations, HistoryPlanes, TextGeometry
from helios.proto import contract_pb2, manifest_pb2

C, M = contract_pb2, manifest_pb2


def latent_history(decl: Declarations, geometry: TextGeometry, *, layer: int, latent: int, rope: int,
                   dtype: int) -> HistoryPlanes:
    """One layer's latent and rotary-key planes and the PAGED_LATENT region naming them."""
    latent_shape = (0, geometry.page_tokens, 1, latent)
    rope_shape = (0, geometry.page_tokens, 1, rope)
    latent_plane = decl.buffer(f"layer{layer}.latent", M.BUFFER_ROLE_CACHE, dtype, latent_shape)
    rope_plane = decl.buffer(f"layer{layer}.rope_key", M.BUFFER_ROLE_CACHE, dtype, rope_shape)
    region = C.HistoryRegion(name=f"layer{layer}", kind=C.HISTORY_KIND_PAGED_LATENT,
                             planes=[latent_plane, rope_plane], tokens_per_record=1, layers=[layer])
    return HistoryPlanes(region, latent_plane, rope_plane, dtype, latent_shape, value_shape=rope_shape)


@dataclass(frozen=True, slots=True)
class HeadRows:
    """Rows [start, stop) of each of `heads` blocks of `block` rows (see the module docstring)."""

    heads: int
    block: int
    start: int
    stop: int
    split: bool = False  # one matrix per head: [heads, stop - start, ...]
    transposed: bool = False  # with split: each head's matrix transposed ([heads, in, stop - start])
    deinterleaved: bool = False  # each head's rows as its even rows, then its odd rows

    def __post_init__(self) -> None:
        if self.heads < 1 or not 0 <= self.start < self.stop <= self.block:
            raise ValueError(f"HeadRows: rows [{self.start}, {self.stop}) of {self.heads} blocks of {self.block}")
        if self.transposed and not self.split:
            raise ValueError("HeadRows: only per-head matrices (split) are transposed")
        if self.deinterleaved and (self.stop - self.start) % 2:
            raise ValueError(f"HeadRows: {self.stop - self.start} rows cannot be de-interleaved in pairs")

    @property
    def transform(self) -> str:
        """The weight catalog's description of the part."""
        text = f"heads{self.heads}x{self.block}[{self.start}:{self.stop}]"
        if self.deinterleaved:
            text += ".deinterleaved"
        if self.split:
            text += ".per_head" + (".transposed" if self.transposed else "")
        return text

    def resource(self, whole: str) -> str:
        return f"{whole}/{self.transform}"

    def shape(self, full: tuple[int, ...]) -> tuple[int, ...]:
        if not full or full[0] != self.heads * self.block:
            raise ValueError(f"part {self.transform} outside a tensor of shape {list(full)}")
        rows = self.stop - self.start
        if not self.split:
            return (self.heads * rows, *full[1:])
        if len(full) != 2:
            raise ValueError(f"part {self.transform}: per-head matrices of a tensor of shape {list(full)}")
        return (self.heads, full[1], rows) if self.transposed else (self.heads, rows, full[1])

    def apply(self, array: np.ndarray) -> np.ndarray:
        """The part of `array` (the whole stored tensor), contiguous."""
        blocks = array.reshape(self.heads, self.block, *array.shape[1:])[:, self.start:self.stop]
        if self.deinterleaved:
            blocks = np.concatenate([blocks[:, 0::2], blocks[:, 1::2]], axis=1)
        if not self.split:
            return np.ascontiguousarray(blocks.reshape(self.heads * (self.stop - self.start), *array.shape[1:]))
        return np.ascontiguousarray(blocks.transpose(0, 2, 1) if self.transposed else blocks)
