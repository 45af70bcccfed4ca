"""The collective operators of the set (host side): how the ranks of a tensor-parallel core combine.

A core with `ranks` > 1 carries one program per rank for every graph; the programs of one graph run
the same operators in the same order, and a collective operator is where they meet: every rank
contributes its input and every rank receives the same output. `ranks` is an attribute so a program
states how many peers its collectives expect (the runtime checks it against the manifest's ranks).

    all_reduce(x) -> out   out = the sum over ranks of x (f32 accumulation in rank order, one rounding)
    all_gather(x) -> out   out = the ranks' x side by side along the last axis, rank 0 first

`docs/operators.md` gives the exact semantics; `helios.reference.collectives` is their executable
definition (the reference interpreter runs the ranks of a core in lockstep), and production lowers
them onto `torch.distributed` collectives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.spec import AttributeSpec, AttributeValue, OperatorSpec, RuleError
from helios.program.types import ACTIVATION_DTYPES, TensorType

Attrs = Mapping[str, AttributeValue]
Types = Sequence[TensorType]
Outs = Sequence[TensorType | None]

SINCE = 4
COLLECTIVES = ("all_reduce", "all_gather")


def _ranks(attrs: Attrs) -> int:
    ranks = int(attrs["ranks"])  # type: ignore[arg-type]
    if ranks < 1:
        raise RuleError(f"ranks must be >= 1, got {ranks}")
    return ranks


def _all_reduce(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    (x,) = ins
    _ranks(attrs)
    if x.dtype not in ACTIVATION_DTYPES or x.rank < 1 or any(e == 0 for e in x.shape):
        raise RuleError(f"x must be f32, bf16 or f16 with static extents, got {x}")
    return [x]


def _all_gather(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    (x,) = ins
    ranks = _ranks(attrs)
    if x.rank < 1 or any(e == 0 for e in x.shape):
        raise RuleError(f"x must have rank >= 1 and static extents, got {x}")
    return [TensorType(x.dtype, (*x.shape[:-1], x.shape[-1] * ranks))]


_RANKS = AttributeSpec(name="ranks", kind="i", required=True,
                       doc="the tensor-parallel ranks that take part (the manifest's ranks)")

COLLECTIVE_SPECS = (
    OperatorSpec("all_reduce", "the sum over ranks of x (f32 in rank order, rounded once), on every rank",
                 ("x",), ("out",), _all_reduce, (_RANKS,), since=SINCE),
    OperatorSpec("all_gather", "the ranks' x side by side along the last axis (rank 0 first), on every rank",
                 ("x",), ("out",), _all_gather, (_RANKS,), since=SINCE),
)
