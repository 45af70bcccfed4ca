"""The vision-encoder operators of the set (host side): the specs of `activation` and
`bidirectional_attention` (version 6).

A vision encoder (a CLIP-style tower and its projector) runs over the patches of one image at a
captured patch capacity. Its layers need what a causal text layer does not: a plain activation
between two products (CLIP's quick-GELU, the projector's GELU) and full attention of every patch
over every patch of the same image.

    activation(x) -> out
        out = act(x), elementwise, `activation` in silu, gelu (erf), gelu_tanh, quick_gelu
        (x * sigmoid(1.702 x)).
    bidirectional_attention(q [N, heads*head_dim], k [N, kv_heads*head_dim], v, group [N] i32) -> out
        Row t of group g = group[t] >= 0 attends every row u with group[u] == g (before and after
        it); grouped-query (query head h reads kv head h // (heads / kv_heads)); scores
        scale * (q . k) in FP32, softmax, weighted sum of v. Rows of a negative group give zeros.

`docs/operators.md` gives the exact semantics; `helios.reference.vision` is the executable definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.spec import AttributeSpec, AttributeValue, OperatorSpec, RuleError
from helios.program.types import ACTIVATION_DTYPES, I32, TensorType

SINCE = 6
PLAIN_ACTIVATIONS = ("silu", "gelu", "gelu_tanh", "quick_gelu")

Attrs = Mapping[str, AttributeValue]
Types = Sequence[TensorType]
Outs = Sequence[TensorType | None]


def _activation(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    (x,) = ins
    if x.dtype not in ACTIVATION_DTYPES or x.rank < 1 or 0 in x.shape:
        raise RuleError(f"x must be a floating tensor with static extents, got {x}")
    return [x]


def _bidirectional_attention(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    q, k, v, group = ins
    head_dim = int(attrs["head_dim"])  # type: ignore[arg-type]
    for t, what in ((q, "q"), (k, "k"), (v, "v")):
        if t.dtype not in ACTIVATION_DTYPES or t.rank != 2 or 0 in t.shape:
            raise RuleError(f"{what} must be a floating [N, heads * head_dim] tensor, got {t}")
        if head_dim <= 0 or t.shape[1] % head_dim:
            raise RuleError(f"{what} width {t.shape[1]} is not a multiple of head_dim {head_dim}")
    if k != v or k.shape[0] != q.shape[0] or k.dtype != q.dtype:
        raise RuleError(f"k {k} and v {v} must have one type, with the rows and dtype of q {q}")
    heads, kv_heads = q.shape[1] // head_dim, k.shape[1] // head_dim
    if heads % kv_heads:
        raise RuleError(f"{heads} query heads are not a multiple of {kv_heads} kv heads")
    if group.dtype != I32 or group.shape != (q.shape[0],):
        raise RuleError(f"group must be i32 [N] = [{q.shape[0]}], got {group}")
    if not float(attrs["scale"]) > 0:  # type: ignore[arg-type]
        raise RuleError(f"attribute scale must be > 0, got {attrs['scale']}")
    return [q]


VISION_SPECS = (
    OperatorSpec("activation", "act(x), elementwise (silu, gelu, gelu_tanh, quick_gelu)",
                 ("x",), ("out",), _activation,
                 (AttributeSpec("activation", "s", required=True, choices=PLAIN_ACTIVATIONS,
                                doc="the activation", since=SINCE),), since=SINCE),
    OperatorSpec("bidirectional_attention",
                 "full grouped-query attention of each row over every row of its group (group < 0: zeros)",
                 ("q", "k", "v", "group"), ("out",), _bidirectional_attention, (
                     AttributeSpec("scale", "f", required=True, doc="multiplies q.k before the softmax",
                                   since=SINCE),
                     AttributeSpec("head_dim", "i", required=True, doc="features per head", since=SINCE),
                 ), since=SINCE),
)
