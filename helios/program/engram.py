"""The Engram operator of the set (host side): the spec of `engram_gather` (version 7).

An Engram table (docs/engram.md) is a hashed n-gram embedding table kept in host memory. Before each
round the host gathers the rows the round's packed tokens address into one of the two frames of a
device staging buffer and writes, per packed token and n-gram order, the staging row holding that
n-gram's embedding; the program reads them with

    engram_gather(staging, row_index; packed_tokens = P) -> out
        staging [F, S, W] (F frames of S rows, read as F * S rows), row_index [R, O] i32 with R >= P
        (one buffer sized for the largest packed capacity; the program reads its leading P rows):
            out[t, o * W + c] = staging[row_index[t, o] // S, row_index[t, o] % S, c]   for t < P
        and a zero block where row_index[t, o] lies outside [0, F * S) (a padding token, or an n-gram
        reaching before the sequence's first position). out is [P, O * W] of the staging dtype.

`docs/operators.md` gives the exact semantics; `helios.reference.engram` is the executable definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.spec import AttributeSpec, AttributeValue, OperatorSpec, RuleError
from helios.program.types import ACTIVATION_DTYPES, I32, TensorType

SINCE = 7

Attrs = Mapping[str, AttributeValue]
Types = Sequence[TensorType]
Outs = Sequence[TensorType | None]


def _engram_gather(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    staging, row_index = ins
    if staging.dtype not in ACTIVATION_DTYPES or staging.rank != 3 or 0 in staging.shape:
        raise RuleError(f"staging must be a floating [F, S, W] tensor with static extents, got {staging}")
    if row_index.dtype != I32 or row_index.rank != 2 or 0 in row_index.shape:
        raise RuleError(f"row_index must be i32 [P, O], got {row_index}")
    packed = int(attrs["packed_tokens"])  # type: ignore[arg-type]
    if not 0 < packed <= row_index.shape[0]:
        raise RuleError(f"packed_tokens {packed} must be in (0, {row_index.shape[0]}] (the row index's rows)")
    return [TensorType(staging.dtype, (packed, row_index.shape[1] * staging.shape[2]))]


ENGRAM_SPECS = (
    OperatorSpec("engram_gather",
                 "out[t, o*W:(o+1)*W] = staging rows[row_index[t, o]] over the F * S staging rows (zero outside)",
                 ("staging", "row_index"), ("out",), _engram_gather,
                 (AttributeSpec("packed_tokens", "i", required=True,
                                doc="P: the packed rows read (the leading rows of the row index)"),),
                 since=SINCE),
)
