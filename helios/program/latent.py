"""The latent-attention operators of the set (host side): the specs of `latent_attention` and
`head_matmul` (version 7).

A paged latent history (HISTORY_KIND_PAGED_LATENT, multi-head latent attention) keeps, per token, one compressed record shared by every head: the latent `c` (kv_lora_rank
features, after its norm) and the rotary key `k_rope` (qk_rope_head_dim features, rotated), in two
cache planes `[pages, T, 1, L]` and `[pages, T, 1, R]` written by `paged_cache_write`. Attention runs
in the absorbed form: each head's no-position query is carried into the latent space by that head's
key block of the decompression (`head_matmul`), scores read the latent and rotary planes directly,
and each head's output stays in the latent space until that head's value block carries it out.

    head_matmul(x [N, H*I], weight [H, O, I]) -> out [N, H*O]
        out[:, h*O:(h+1)*O] = x[:, h*I:(h+1)*I] @ weight[h].T for every head h (f32 accumulation).
    latent_attention(q_latent [P, H*L], q_rope [P, H*R], latent_cache [N, T, 1, L],
                     rope_cache [N, T, 1, R], token_lane [P], positions [P], page_table [S, M]) -> out [P, H*L]
        Row t of lane l >= 0 at position p, head h, over the lane's positions j in [0, p]:
            s_j = scale * (q_latent[t, h] . c_j + q_rope[t, h] . k_rope_j)
            out[t, h] = sum_j softmax(s)_j c_j
        where c_j and k_rope_j are the records of position j in the lane's pages. Padding rows
        (lane < 0) give zeros.

`docs/operators.md` gives the exact semantics; `helios.reference.latent` is the executable definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.spec import AttributeSpec, AttributeValue, OperatorSpec, RuleError
from helios.program.types import ACTIVATION_DTYPES, I32, TensorType

SINCE = 7

Attrs = Mapping[str, AttributeValue]
Types = Sequence[TensorType]
Outs = Sequence[TensorType | None]


def _floating(t: TensorType, what: str, rank: int) -> None:
    if t.dtype not in ACTIVATION_DTYPES or t.rank != rank:
        raise RuleError(f"{what} must be a floating tensor of rank {rank}, got {t}")


def _index(t: TensorType, what: str, rank: int) -> None:
    if t.dtype != I32 or t.rank != rank:
        raise RuleError(f"{what} must be i32 of rank {rank}, got {t}")


def _head_matmul(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    x, weight = ins
    _floating(x, "x", 2)
    _floating(weight, "weight [heads, out, in]", 3)
    heads, out_width, in_width = weight.shape
    if 0 in weight.shape or x.shape[1] != heads * in_width:
        raise RuleError(f"x {x} width must be heads * in of weight [heads, out, in] {weight}")
    return [TensorType(x.dtype, (x.shape[0], heads * out_width))]


def _latent_plane(cache: TensorType, what: str) -> int:
    _floating(cache, what, 4)
    if any(e == 0 for e in cache.shape[1:]) or cache.shape[2] != 1:
        raise RuleError(f"{what} {cache} must be [pages, T, 1, width] (one record a token shared by every "
                        "head; only the page extent may be sized at load)")
    return cache.shape[3]


def _latent_attention(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    q_latent, q_rope, latent_cache, rope_cache, token_lane, positions, page_table = ins
    _floating(q_latent, "q_latent", 2)
    _floating(q_rope, "q_rope", 2)
    latent = _latent_plane(latent_cache, "latent_cache")
    rope = _latent_plane(rope_cache, "rope_cache")
    if rope_cache.shape[:2] != latent_cache.shape[:2] or rope_cache.dtype != latent_cache.dtype:
        raise RuleError(f"rope_cache {rope_cache} must have the pages, page tokens and dtype of latent_cache "
                        f"{latent_cache}")
    if q_latent.shape[1] % latent:
        raise RuleError(f"q_latent {q_latent} width is not a multiple of the latent width {latent}")
    heads = q_latent.shape[1] // latent
    if q_rope.shape != (q_latent.shape[0], heads * rope):
        raise RuleError(f"q_rope {q_rope} must be [{q_latent.shape[0]}, {heads} heads * {rope}]")
    _index(token_lane, "token_lane", 1)
    _index(positions, "positions", 1)
    _index(page_table, "page_table", 2)
    if token_lane.shape[0] != q_latent.shape[0] or positions.shape[0] != q_latent.shape[0]:
        raise RuleError(f"token_lane {token_lane} and positions {positions} need {q_latent.shape[0]} rows")
    if not float(attrs["scale"]) > 0:  # type: ignore[arg-type]
        raise RuleError(f"attribute scale must be > 0, got {attrs['scale']}")
    return [q_latent]


LATENT_SPECS = (
    OperatorSpec("head_matmul", "out[:, h] = x[:, h] @ weight[h].T per head (weight [heads, out, in])",
                 ("x", "weight"), ("out",), _head_matmul, since=SINCE),
    OperatorSpec("latent_attention",
                 "causal attention of packed rows over each lane's latent and rotary-key records (absorbed "
                 "form: scores q_latent.c + q_rope.k_rope, output in the latent space)",
                 ("q_latent", "q_rope", "latent_cache", "rope_cache", "token_lane", "positions", "page_table"),
                 ("out",), _latent_attention,
                 (AttributeSpec("scale", "f", required=True, doc="multiplies the scores before the softmax",
                                since=SINCE),), since=SINCE),
)
