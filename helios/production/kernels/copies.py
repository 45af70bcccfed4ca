"""Copies and fills of whole tensors, several in one launch (device side): `copy_fill_group`.

A decode round ends by writing its completion record: a few `copy` operators (generation, emitted,
sampled ids, endpoint into their completion fields) and `fill`s (cursors, status), each a tensor of
a handful of elements. As torch calls each is its own launch outside the dependent-launch chain;
here one launch does them all: program (b, i) moves block b of item i, an item being a copy
(`dst = src`, one dtype, the same element count, row-major) or a fill (`dst[...] = value`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from helios.production.kernels.launch import dependent, wait_for_prior

MAX_ITEMS = 8  # copies and fills one launch takes


@dataclass(frozen=True, slots=True)
class Move:
    """One item of a group: `dst = src` (a copy), or `dst[...] = value` (a fill, `src` None)."""

    dst: torch.Tensor
    src: torch.Tensor | None = None
    value: float | int = 0

    def __post_init__(self) -> None:
        if not self.dst.is_contiguous():
            raise ValueError(f"a grouped copy or fill writes a contiguous tensor, got strides {self.dst.stride()}")
        if self.src is not None and (not self.src.is_contiguous() or self.src.dtype != self.dst.dtype
                                     or self.src.numel() != self.dst.numel()):
            raise ValueError(f"a grouped copy takes a contiguous source of the destination's dtype and element "
                             f"count: {self.src.dtype} x {self.src.numel()} into {self.dst.dtype} x {self.dst.numel()}")


@triton.jit
def _move(dst_ptr, src_ptr, n, value, block, FILL: tl.constexpr, BLOCK: tl.constexpr):
    offsets = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    if FILL:  # the value's own type (an integer or a float argument), converted as the store converts
        values = (tl.zeros((BLOCK,), tl.int32) + value).to(dst_ptr.dtype.element_ty)
    else:
        values = tl.load(src_ptr + offsets, mask=mask)
    tl.store(dst_ptr + offsets, values, mask=mask)


@triton.jit
def _copy_fill_kernel(d0, s0, n0, v0, d1, s1, n1, v1, d2, s2, n2, v2, d3, s3, n3, v3,
                  d4, s4, n4, v4, d5, s5, n5, v5, d6, s6, n6, v6, d7, s7, n7, v7,
                  F0: tl.constexpr, F1: tl.constexpr, F2: tl.constexpr, F3: tl.constexpr,
                  F4: tl.constexpr, F5: tl.constexpr, F6: tl.constexpr, F7: tl.constexpr,
                  ITEMS: tl.constexpr, BLOCK: tl.constexpr, PDL: tl.constexpr):
    wait_for_prior(PDL)
    block = tl.program_id(0)
    item = tl.program_id(1)
    if item == 0:
        _move(d0, s0, n0, v0, block, F0, BLOCK)
    if ITEMS > 1 and item == 1:
        _move(d1, s1, n1, v1, block, F1, BLOCK)
    if ITEMS > 2 and item == 2:
        _move(d2, s2, n2, v2, block, F2, BLOCK)
    if ITEMS > 3 and item == 3:
        _move(d3, s3, n3, v3, block, F3, BLOCK)
    if ITEMS > 4 and item == 4:
        _move(d4, s4, n4, v4, block, F4, BLOCK)
    if ITEMS > 5 and item == 5:
        _move(d5, s5, n5, v5, block, F5, BLOCK)
    if ITEMS > 6 and item == 6:
        _move(d6, s6, n6, v6, block, F6, BLOCK)
    if ITEMS > 7 and item == 7:
        _move(d7, s7, n7, v7, block, F7, BLOCK)


def copy_fill_group(moves: Sequence[Move], *, block: int = 1024):
    """A bound launch doing every move of `moves` (1..MAX_ITEMS copies and fills) at once; the items
    must not overlap one another (the lowering groups only operators that touch distinct tensors)."""
    if not 1 <= len(moves) <= MAX_ITEMS:
        raise ValueError(f"copy_fill_group takes 1..{MAX_ITEMS} copies and fills, got {len(moves)}")
    largest = max(move.dst.numel() for move in moves)
    block = min(block, triton.next_power_of_2(max(largest, 1)))
    packed: list[object] = []
    fills: dict[str, bool] = {}
    for i in range(MAX_ITEMS):
        move = moves[i] if i < len(moves) else moves[0]
        fill = move.src is None
        value = (float(move.value) if move.dst.is_floating_point() else int(move.value)) if fill else 0
        packed += [move.dst, move.dst if fill else move.src, move.dst.numel(), value]
        fills[f"F{i}"] = fill
    if largest == 0:
        return lambda: None
    launch = _copy_fill_kernel[(triton.cdiv(largest, block), len(moves))]
    meta = dict(ITEMS=len(moves), BLOCK=block, **fills, **dependent(moves[0].dst))
    return lambda: launch(*packed, **meta)


__all__ = ["MAX_ITEMS", "Move", "copy_fill_group"]
