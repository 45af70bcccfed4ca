"""Tensor-parallel ranks at preparation (preparation side, host; NumPy only): which part of each
stored tensor a rank holds, and under which resource id.

    shard = RankShard(rank=1, ranks=2)
    shard.span(128)                        # (64, 128): the rank's half of an extent of 128
    part = WeightPart.rows(64, 128)        # rows 64..127 of a [128, H] tensor
    part.resource("weight/x"), part.transform, part.shape((128, 64)), part.apply(array)

A rank holds a contiguous slice of each split axis (`span`: the extent divided evenly, rank 0
first). A tensor is held whole (`WHOLE`: norms, head norms, the biases of row-parallel
products), by rows (column-parallel products: q/k/v, gate/up, the vocabulary of the embedding
and of the output head) or by columns (row-parallel products: the attention output and down
projections). A slice's resource id names the slice (`weight/x/rows64-128`), so ranks that hold the
same slice (key/value heads replicated where ranks exceed them, a tied head) share one resource,
and a whole tensor keeps the id a one-rank core gives it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class RankShard:
    """One rank of `ranks` tensor-parallel ranks."""

    rank: int
    ranks: int

    def __post_init__(self) -> None:
        if self.ranks < 1 or not 0 <= self.rank < self.ranks:
            raise ValueError(f"rank {self.rank} of {self.ranks} ranks")

    def span(self, extent: int) -> tuple[int, int]:
        """[start, stop) of the rank's even share of `extent` (which the ranks divide)."""
        if extent % self.ranks:
            raise ValueError(f"{self.ranks} ranks do not divide an extent of {extent}")
        share = extent // self.ranks
        return self.rank * share, (self.rank + 1) * share


@dataclass(frozen=True, slots=True)
class WeightPart:
    """The part of one stored tensor a rank holds: all of it (axis None) or [start, stop) of one axis."""

    axis: int | None = None  # 0: rows, 1: columns, None: the whole tensor
    start: int = 0
    stop: int = 0

    @classmethod
    def rows(cls, start: int, stop: int) -> WeightPart:
        return cls(0, start, stop)

    @classmethod
    def columns(cls, start: int, stop: int) -> WeightPart:
        return cls(1, start, stop)

    @property
    def transform(self) -> str:
        """The weight catalog's description of the part ("none": the stored tensor as it is)."""
        if self.axis is None:
            return "none"
        return f"{'rows' if self.axis == 0 else 'columns'}[{self.start}:{self.stop}]"

    def resource(self, whole: str) -> str:
        """The resource id of this part of the tensor whose whole resource id is `whole`."""
        if self.axis is None:
            return whole
        return f"{whole}/{'rows' if self.axis == 0 else 'columns'}{self.start}-{self.stop}"

    def shape(self, full: tuple[int, ...]) -> tuple[int, ...]:
        if self.axis is None:
            return full
        if not 0 <= self.start < self.stop <= full[self.axis]:
            raise ValueError(f"part {self.transform} outside a tensor of shape {list(full)}")
        return tuple(self.stop - self.start if i == self.axis else e for i, e in enumerate(full))

    def apply(self, array: np.ndarray) -> np.ndarray:
        """The part of `array` (the whole stored tensor), contiguous."""
        if self.axis is None:
            return array
        index = [slice(None)] * array.ndim
        index[self.axis] = slice(self.start, self.stop)
        return np.ascontiguousarray(array[tuple(index)])


WHOLE = WeightPart()
