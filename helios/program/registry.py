"""The versioned operator set (host side): `OPERATORS`, one `OperatorSpec` per operator.

`docs/operators.md` gives each operator's exact semantics and layouts; the NumPy functions in
`helios.reference.operators` are their executable definition. Adding an operator or an attribute
bumps `OPERATOR_SET_VERSION`; an engine keeps accepting every version in
`SUPPORTED_OPERATOR_SET_VERSIONS` so older cores keep loading without re-export.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from helios.program.collectives import COLLECTIVE_SPECS
from helios.program.engram import ENGRAM_SPECS
from helios.program.latent import LATENT_SPECS
from helios.program.recurrent import RECURRENT_SPECS
from helios.program.scores import SCORE_SPECS
from helios.program.snapshots import SNAPSHOT_SPECS
from helios.program.spec import AttributeSpec, AttributeValue, OperatorSpec, RuleError
from helios.program.speculative import SPECULATIVE_SPECS
from helios.program.types import (
    ACTIVATION_DTYPES,
    DTYPES_BY_NAME,
    F32,
    FLOAT_DTYPES,
    I32,
    I64,
    TensorType,
    dtype_name,
)
from helios.program.vision import VISION_SPECS

# Version 1: the first seventeen operators. Version 2 adds `gather` and `where` (device-owned
# pending tokens). Version 3 adds `scatter`, `column_write` and the speculative operators
# (helios/program/speculative.py). Version 4 adds `copied_proposal` (history drafting), the
# collectives `all_reduce` and `all_gather` (helios/program/collectives.py), `embedding`'s
# `row_offset` (a rank's slice of the vocabulary) and `prompt_scores` (scored prefill,
# helios/program/scores.py). Version 5 adds `speculative_grammar_mask` (the per-position grammar
# masks of a speculative round), `page_snapshot` and `page_restore` (RESTORATION programs,
# helios/program/snapshots.py). Version 6 adds `short_convolution` and `state_row_copy` (recurrent
# histories, helios/program/recurrent.py), `activation` and `bidirectional_attention` (vision
# encoders, helios/program/vision.py). Version 7 adds `latent_attention` and `head_matmul` (paged
# latent histories, helios/program/latent.py) and `engram_gather` (Engram tables' staging frames,
# helios/program/engram.py). Every earlier meaning is unchanged, so older programs keep loading.
OPERATOR_SET_VERSION = 7
SUPPORTED_OPERATOR_SET_VERSIONS = frozenset({1, 2, 3, 4, 5, 6, 7})

# Columns of the `parameters` input of `sample` ([B, 7] f32), in this order.
SAMPLING_PARAMETERS = (
    "temperature",  # 0: greedy
    "top_p",  # (0, 1]; 1: disabled
    "top_k",  # integral; 0: disabled
    "min_p",  # [0, 1]; 0: disabled
    "repetition_penalty",  # > 0; 1: disabled
    "presence_penalty",  # 0: disabled
    "frequency_penalty",  # 0: disabled
)
# The rotary operator's frequency scalings (helios/program/rope.py computes each).
ROPE_TYPES = ("default", "linear", "frequency_band", "yarn")
# NOTE: cores prepared before the frequency-band scaling had its own name carry the checkpoint
# format's spelling of it. Engine upgrades keep serving previously supported cores without re-export,
# so decoding reads that spelling as the new name (AttributeSpec.renamed); nothing writes it any more.
RENAMED_ROPE_TYPES = (("llama3", "frequency_band"),)
ACTIVATIONS = ("silu", "gelu_tanh", "gelu")

Attrs = Mapping[str, AttributeValue]
Types = Sequence[TensorType]
Outs = Sequence[TensorType | None]


def _activation(t: TensorType, what: str, rank: int | None = None) -> None:
    if t.dtype not in ACTIVATION_DTYPES:
        raise RuleError(f"{what} must be f32, bf16 or f16, got {t}")
    if rank is not None and t.rank != rank:
        raise RuleError(f"{what} must have rank {rank}, got {t}")


def _index(t: TensorType, what: str, rank: int) -> None:
    if t.dtype != I32 or t.rank != rank:
        raise RuleError(f"{what} must be i32 of rank {rank}, got {t}")


def _heads(width: int, head_dim: int, what: str) -> int:
    if head_dim <= 0 or width % head_dim:
        raise RuleError(f"{what} width {width} is not a multiple of head_dim {head_dim}")
    return width // head_dim


def _positive(attrs: Attrs, name: str) -> None:
    if name in attrs and not attrs[name] > 0:  # type: ignore[operator]
        raise RuleError(f"attribute {name} must be > 0, got {attrs[name]}")


def _embedding(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    ids, table = ins
    _index(ids, "ids", 1)
    _activation(table, "table", 2)
    if attrs.get("row_offset", 0) < 0:  # type: ignore[operator]
        raise RuleError(f"row_offset must be >= 0, got {attrs['row_offset']}")
    return [TensorType(table.dtype, (ids.shape[0], table.shape[1]))]


def _rms_norm(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    x = ins[0]
    _activation(x, "x")
    if x.rank < 1:
        raise RuleError("x must have rank >= 1")
    for extra, what in zip(ins[1:], ("weight", "bias"), strict=False):
        _activation(extra, what, 1)
        if extra.shape[0] != x.shape[-1]:
            raise RuleError(f"{what} {extra} must match the last extent of x {x}")
    _positive(attrs, "eps")
    return [x]


def _head_rms_norm(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    x, weight = ins
    _activation(x, "x", 2)
    _activation(weight, "weight", 1)
    head_dim = int(attrs["head_dim"])  # type: ignore[arg-type]
    _heads(x.shape[1], head_dim, "x")
    if weight.shape[0] != head_dim:
        raise RuleError(f"weight {weight} must have head_dim {head_dim} entries")
    _positive(attrs, "eps")
    return [x]


def _matmul(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    x, weight = ins[0], ins[1]
    _activation(x, "x")
    _activation(weight, "weight [out, in]", 2)
    if x.rank < 1 or x.shape[-1] != weight.shape[1]:
        raise RuleError(f"x {x} last extent must equal the in extent of weight [out, in] {weight}")
    if len(ins) == 3:
        _activation(ins[2], "bias", 1)
        if ins[2].shape[0] != weight.shape[0]:
            raise RuleError(f"bias {ins[2]} must have the out extent of weight {weight}")
    return [TensorType(x.dtype, (*x.shape[:-1], weight.shape[0]))]


def _elementwise(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    a, b = ins
    _activation(a, "a")
    if a != b:
        raise RuleError(f"operands must have one shape and dtype, got {a} and {b}")
    return [a]


def _rotary(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    x, positions = ins
    _activation(x, "x", 2)
    _index(positions, "positions", 1)
    if positions.shape[0] != x.shape[0]:
        raise RuleError(f"positions {positions} must have one entry per row of x {x}")
    head_dim = int(attrs["head_dim"])  # type: ignore[arg-type]
    _heads(x.shape[1], head_dim, "x")
    rotary_dim = int(attrs["rotary_dim"])  # type: ignore[arg-type]
    if not (0 < rotary_dim <= head_dim and rotary_dim % 2 == 0):
        raise RuleError(f"rotary_dim {rotary_dim} must be even and in (0, head_dim={head_dim}]")
    _positive(attrs, "theta")
    _positive(attrs, "factor")
    rope_type = attrs["rope_type"]
    if rope_type in ("frequency_band", "yarn") and "original_max_position_embeddings" not in attrs:
        raise RuleError(f"rope_type {rope_type} requires original_max_position_embeddings")
    if rope_type == "frequency_band" and not attrs["high_freq_factor"] > attrs["low_freq_factor"]:  # type: ignore[operator]
        raise RuleError("frequency_band scaling requires high_freq_factor > low_freq_factor")
    _positive(attrs, "original_max_position_embeddings")
    return [x]


def _cache_plane(cache: TensorType, what: str) -> None:
    _activation(cache, what, 4)
    if any(e == 0 for e in cache.shape[1:]):
        raise RuleError(f"{what} {cache}: only the page extent may be sized at load")


def _lanes(token_lane: TensorType, positions: TensorType, page_table: TensorType, rows: int) -> None:
    _index(token_lane, "token_lane", 1)
    _index(positions, "positions", 1)
    _index(page_table, "page_table", 2)
    if token_lane.shape[0] != rows or positions.shape[0] != rows:
        raise RuleError(f"token_lane {token_lane} and positions {positions} need {rows} rows")


def _paged_cache_write(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    cache, values, token_lane, positions, page_table = ins
    _cache_plane(cache, "cache")
    _activation(values, "values", 2)
    if values.shape[1] != cache.shape[2] * cache.shape[3]:
        raise RuleError(f"values {values} width must be kv_heads * head_dim of cache {cache}")
    _lanes(token_lane, positions, page_table, values.shape[0])
    return [cache]


def _paged_attention(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    q, key_cache, value_cache, token_lane, positions, page_table = ins
    _activation(q, "q", 2)
    _cache_plane(key_cache, "key_cache")
    if value_cache != key_cache:
        raise RuleError(f"value_cache {value_cache} must match key_cache {key_cache}")
    kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
    heads = _heads(q.shape[1], head_dim, "q")
    if heads % kv_heads:
        raise RuleError(f"query heads {heads} must be a multiple of kv heads {kv_heads}")
    _lanes(token_lane, positions, page_table, q.shape[0])
    _positive(attrs, "scale")
    _positive(attrs, "sliding_window")
    _positive(attrs, "softcap")
    return [q]


def _last_row_gather(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    x, token_lane = ins
    if x.rank < 1:
        raise RuleError("x must have rank >= 1")
    _index(token_lane, "token_lane", 1)
    if token_lane.shape[0] != x.shape[0]:
        raise RuleError(f"token_lane {token_lane} must have one entry per row of x {x}")
    _positive(attrs, "lanes")
    return [TensorType(x.dtype, (int(attrs["lanes"]), *x.shape[1:]))]  # type: ignore[arg-type]


def _logits(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    h, weight = ins
    _activation(h, "h", 2)
    _activation(weight, "weight [vocab, hidden]", 2)
    if h.shape[1] != weight.shape[1]:
        raise RuleError(f"h {h} width must equal the hidden extent of weight [vocab, hidden] {weight}")
    _positive(attrs, "sampled_tokens")
    _positive(attrs, "softcap")
    if attrs.get("sampled_tokens", 1) > weight.shape[0]:  # type: ignore[operator]
        raise RuleError(f"sampled_tokens {attrs['sampled_tokens']} exceeds the vocab rows of {weight}")
    return [TensorType(F32, (h.shape[0], weight.shape[0]))]


def _sample(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    logits, seed, positions, parameters, histogram, grammar_mask = ins
    if logits.dtype != F32 or logits.rank != 2:
        raise RuleError(f"logits must be f32 [B, V], got {logits}")
    rows, width = logits.shape
    if seed != TensorType(I64, (rows,)):
        raise RuleError(f"seed must be i64 [{rows}], got {seed}")
    _index(positions, "positions", 1)
    if positions.shape[0] != rows:
        raise RuleError(f"positions must be i32 [{rows}], got {positions}")
    if parameters != TensorType(F32, (rows, len(SAMPLING_PARAMETERS))):
        raise RuleError(f"parameters must be f32 [{rows}, {len(SAMPLING_PARAMETERS)}], got {parameters}")
    _index(histogram, "histogram", 2)
    if histogram.shape[0] != rows:
        raise RuleError(f"histogram must have {rows} rows, got {histogram}")
    _index(grammar_mask, "grammar_mask", 2)
    if grammar_mask.shape != (rows, (width + 31) // 32):
        raise RuleError(f"grammar_mask must be i32 [{rows}, {(width + 31) // 32}], got {grammar_mask}")
    if not 0 <= attrs["draw_index"] < 2**32:  # type: ignore[operator]
        raise RuleError(f"draw_index must fit in 32 bits, got {attrs['draw_index']}")
    return [TensorType(I32, (rows,))]


def _argmax(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    (logits,) = ins
    if logits.dtype not in FLOAT_DTYPES or logits.rank != 2:
        raise RuleError(f"logits must be floating [B, V], got {logits}")
    return [TensorType(I32, (logits.shape[0],))]


def _numel(t: TensorType) -> int:
    n = 1
    for e in t.shape:
        n *= e
    return n


def _copy(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    (x,) = ins
    out = outs[0] if outs else None
    if out is None:
        return [x]
    if out.dtype != x.dtype or _numel(out) != _numel(x):
        raise RuleError(f"copy needs one dtype and one element count: {x} into {out}")
    return [out]


def _fill(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    shape = tuple(int(e) for e in attrs["shape"])  # type: ignore[union-attr]
    if any(e <= 0 for e in shape):
        raise RuleError(f"shape {list(shape)} must hold positive extents")
    dtype = DTYPES_BY_NAME[str(attrs["dtype"])]
    value = float(attrs["value"])  # type: ignore[arg-type]
    if dtype not in FLOAT_DTYPES and value != int(value):
        raise RuleError(f"value {value} is not integral but dtype is {dtype_name(dtype)}")
    return [TensorType(dtype, shape)]


def _gather(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    x, index = ins
    if x.rank < 1 or any(e == 0 for e in x.shape):
        raise RuleError(f"x must have rank >= 1 and static extents, got {x}")
    _index(index, "index", 1)
    return [TensorType(x.dtype, (index.shape[0], *x.shape[1:]))]


def _where(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    cond, a, b = ins
    if a != b:
        raise RuleError(f"a and b must have one shape and dtype, got {a} and {b}")
    if cond.dtype != I32 or cond.shape != a.shape:
        raise RuleError(f"cond must be i32 of the shape of a {a}, got {cond}")
    return [a]


def _scatter(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    out, x, index = ins
    _index(index, "index", 1)
    if x.rank < 1 or x.shape[0] != index.shape[0]:
        raise RuleError(f"x {x} must have one row per index entry {index}")
    if out.dtype != x.dtype or out.shape[1:] != x.shape[1:] or any(e == 0 for e in out.shape):
        raise RuleError(f"out {out} must have the dtype and row shape of x {x}")
    return [out]


def _column_write(ins: Types, attrs: Attrs, outs: Outs) -> list[TensorType]:
    out, value = ins
    if out.rank < 2 or out.dtype != value.dtype or (out.shape[0], *out.shape[2:]) != value.shape:
        raise RuleError(f"value {value} must be a column of out {out} (out without its second axis)")
    if not 0 <= int(attrs["index"]) < out.shape[1]:  # type: ignore[arg-type]
        raise RuleError(f"index {attrs['index']} outside the {out.shape[1]} columns of {out}")
    return [out]


def _a(name: str, kind: str, doc: str, **kw: object) -> AttributeSpec:
    return AttributeSpec(name=name, kind=kind, doc=doc, **kw)  # type: ignore[arg-type]


_EPS = _a("eps", "f", "added to the mean square (variance) before the square root", required=True)
_HEAD_DIM = _a("head_dim", "i", "features per head; the row is heads * head_dim wide", required=True)

_SPECS = (
    OperatorSpec("embedding", "out[t] = table[ids[t] - row_offset] (zero row outside [0, V))",
                 ("ids", "table"), ("out",), _embedding,
                 (_a("row_offset", "i", "the vocabulary id of the table's first row (a rank's slice)",
                     default=0, since=4),)),
    OperatorSpec("rms_norm", "x / sqrt(mean(x^2) + eps) * (weight + weight_offset) over the last axis",
                 ("x", "weight"), ("out",), _rms_norm,
                 (_EPS, _a("weight_offset", "f", "added to weight (1.0 for (1 + w) checkpoints)", default=0.0))),
    OperatorSpec("layer_norm", "(x - mean) / sqrt(var + eps) * weight + bias over the last axis",
                 ("x", "weight", "bias"), ("out",), _rms_norm, (_EPS,), optional_inputs=1),
    OperatorSpec("head_rms_norm", "rms_norm applied to each head_dim slice of a row",
                 ("x", "weight"), ("out",), _head_rms_norm, (_EPS, _HEAD_DIM)),
    OperatorSpec("matmul", "x @ weight.T + bias, weight stored [out, in]",
                 ("x", "weight", "bias"), ("out",), _matmul, optional_inputs=1),
    OperatorSpec("add", "a + b, elementwise", ("a", "b"), ("out",), _elementwise),
    OperatorSpec("mul", "a * b, elementwise", ("a", "b"), ("out",), _elementwise),
    OperatorSpec("gated_activation", "activation(gate) * up, elementwise",
                 ("gate", "up"), ("out",), _elementwise,
                 (_a("activation", "s", "the gate's activation", required=True, choices=ACTIVATIONS),)),
    OperatorSpec("rotary", "rotate_half rotary embedding of each head by the row's position",
                 ("x", "positions"), ("out",), _rotary, (
                     _a("theta", "f", "rope base", required=True),
                     _HEAD_DIM,
                     _a("rotary_dim", "i", "leading features of each head that rotate (even)", required=True),
                     _a("rope_type", "s", "frequency scaling", default="default", choices=ROPE_TYPES,
                        renamed=RENAMED_ROPE_TYPES),
                     _a("factor", "f", "linear, frequency_band, yarn: the scaling factor", default=1.0),
                     _a("low_freq_factor", "f", "frequency_band: above original / it, frequency / factor",
                        default=1.0),
                     _a("high_freq_factor", "f", "frequency_band: below original / it, frequency kept",
                        default=4.0),
                     _a("original_max_position_embeddings", "i", "frequency_band, yarn: pretraining context"),
                     _a("beta_fast", "f", "yarn", default=32.0),
                     _a("beta_slow", "f", "yarn", default=1.0),
                     _a("mscale", "f", "yarn: numerator mscale when attention_factor is unset"),
                     _a("mscale_all_dim", "f", "yarn: denominator mscale when attention_factor is unset"),
                     _a("attention_factor", "f", "multiplies cos and sin; unset: derived as HF does"),
                     _a("truncate", "b", "yarn: floor/ceil the correction range", default=True),
                 )),
    OperatorSpec("paged_cache_write", "cache[page_table[l, p // T], p % T] = values[t] for non-padding rows",
                 ("cache", "values", "token_lane", "positions", "page_table"), ("cache",),
                 _paged_cache_write, in_place=((0, 0),)),
    OperatorSpec("paged_attention", "causal grouped-query attention of packed rows over each lane's pages",
                 ("q", "key_cache", "value_cache", "token_lane", "positions", "page_table"), ("out",),
                 _paged_attention, (
                     _a("scale", "f", "multiplies q.k before soft-cap and softmax", required=True),
                     _a("sliding_window", "i", "keys with position > query position - window; unset: all"),
                     _a("softcap", "f", "scores become softcap * tanh(scores / softcap); unset: none"),
                 )),
    OperatorSpec("last_row_gather", "out[l] = x[last row t with token_lane[t] == l] (zero if none)",
                 ("x", "token_lane"), ("out",), _last_row_gather,
                 (_a("lanes", "i", "B: the lane capacity", required=True),)),
    OperatorSpec("logits", "f32 h @ weight.T; columns >= sampled_tokens read -inf",
                 ("h", "weight"), ("out",), _logits, (
                     _a("sampled_tokens", "i", "columns at or past it are -inf; unset: none"),
                     _a("softcap", "f", "logits become softcap * tanh(logits / softcap); unset: none"),
                 )),
    OperatorSpec("sample", "filtered categorical draw with Philox uniforms (docs/sampling.md)",
                 ("logits", "seed", "positions", "parameters", "histogram", "grammar_mask"), ("ids",),
                 _sample, (_a("draw_index", "i", "low word of the Philox counter", default=0),)),
    OperatorSpec("argmax", "index of the largest value of each row, lowest index on ties",
                 ("logits",), ("ids",), _argmax),
    OperatorSpec("copy", "out = x in row-major order (same dtype, same element count)",
                 ("x",), ("out",), _copy),
    OperatorSpec("gather", "out[t] = x[index[t]] along the first axis (zero row for index outside [0, rows))",
                 ("x", "index"), ("out",), _gather, since=2),
    OperatorSpec("where", "out = cond != 0 ? a : b, elementwise (any dtype)",
                 ("cond", "a", "b"), ("out",), _where, since=2),
    OperatorSpec("scatter", "out[index[t]] = x[t] along the first axis (rows outside [0, R) skipped)",
                 ("out", "x", "index"), ("out",), _scatter, in_place=((0, 0),), since=3),
    OperatorSpec("column_write", "out[:, index] = value (out's second axis)",
                 ("out", "value"), ("out",), _column_write,
                 (_a("index", "i", "the column written", required=True),), in_place=((0, 0),), since=3),
    *SPECULATIVE_SPECS,
    *COLLECTIVE_SPECS,
    *SCORE_SPECS,
    *SNAPSHOT_SPECS,
    *RECURRENT_SPECS,
    *VISION_SPECS,
    *LATENT_SPECS,
    *ENGRAM_SPECS,
    OperatorSpec("fill", "out[...] = value", (), ("out",), _fill, (
        _a("value", "f", "the value (integral for integer dtypes)", required=True),
        _a("shape", "ints", "the output shape", required=True),
        _a("dtype", "s", "the output dtype", required=True, choices=tuple(DTYPES_BY_NAME)),
    )),
)

OPERATORS: Mapping[str, OperatorSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})
