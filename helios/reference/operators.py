"""The reference operators: one plain NumPy function per operator of the set (host side).

These functions are the executable specification of `docs/operators.md`. Each takes its inputs
positionally (NumPy arrays) and its attributes as keywords, computes in FP32 and returns FP32 (or
integer) arrays; the interpreter rounds to the declared output dtype when it stores. In-place
operators (`paged_cache_write`) update the array they are given and return it.
`REFERENCE_OPERATORS` maps every operator name to its function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np

from helios.program.rope import rope_frequencies
from helios.program.types import BF16, DTYPES_BY_NAME, F16, F32, F64, I32, I64, U8, U32
from helios.reference import (
    collectives,
    engram,
    latent,
    recurrent,
    sampling,
    scores,
    snapshots,
    speculative,
    vision,
)
from helios.reference.pages import InvalidCacheSlot, cache_slots, lane_history  # noqa: F401 (re-exported)

F = np.float32


def _f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=F)


def embedding(ids: np.ndarray, table: np.ndarray, *, row_offset: int = 0) -> np.ndarray:
    table = _f32(table)
    ids = np.asarray(ids, dtype=np.int64) - row_offset
    valid = (ids >= 0) & (ids < table.shape[0])
    out = np.zeros((ids.shape[0], table.shape[1]), dtype=F)
    out[valid] = table[ids[valid]]
    return out


def rms_norm(x: np.ndarray, weight: np.ndarray, *, eps: float, weight_offset: float = 0.0) -> np.ndarray:
    x = _f32(x)
    mean_square = np.mean(x * x, axis=-1, keepdims=True, dtype=F)
    normed = x / np.sqrt(mean_square + F(eps))
    return (normed * (_f32(weight) + F(weight_offset))).astype(F)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None, *, eps: float) -> np.ndarray:
    x = _f32(x)
    mean = np.mean(x, axis=-1, keepdims=True, dtype=F)
    centered = x - mean
    variance = np.mean(centered * centered, axis=-1, keepdims=True, dtype=F)
    out = centered / np.sqrt(variance + F(eps)) * _f32(weight)
    if bias is not None:
        out = out + _f32(bias)
    return out.astype(F)


def head_rms_norm(x: np.ndarray, weight: np.ndarray, *, eps: float, head_dim: int) -> np.ndarray:
    rows, width = x.shape
    heads = _f32(x).reshape(rows, width // head_dim, head_dim)
    return rms_norm(heads, weight, eps=eps).reshape(rows, width)


def matmul(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """x @ weight.T (+ bias); weight is stored [out, in]."""
    out = _f32(x) @ _f32(weight).T
    if bias is not None:
        out = out + _f32(bias)
    return out.astype(F)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_f32(a) + _f32(b)).astype(F)


def mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (_f32(a) * _f32(b)).astype(F)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gated_activation(gate: np.ndarray, up: np.ndarray, *, activation: str) -> np.ndarray:
    g = _f32(gate)
    if activation == "silu":
        with np.errstate(over="ignore"):
            act = g / (F(1) + np.exp(-g))
    elif activation == "gelu":
        act = (F(0.5) * g * (F(1) + _erf(g / np.sqrt(F(2))).astype(F))).astype(F)
    elif activation == "gelu_tanh":
        inner = F(math.sqrt(2.0 / math.pi)) * (g + F(0.044715) * g * g * g)
        act = F(0.5) * g * (F(1) + np.tanh(inner))
    else:
        raise ValueError(f"unknown activation {activation!r}")
    return (act * _f32(up)).astype(F)


def rotary(x: np.ndarray, positions: np.ndarray, *, theta: float, head_dim: int, rotary_dim: int,
           **scaling: object) -> np.ndarray:
    """HF rotate_half rotary embedding of the first rotary_dim features of each head."""
    inv_freq, attention_factor = rope_frequencies(theta=theta, rotary_dim=rotary_dim, **scaling)  # type: ignore[arg-type]
    rows, width = x.shape
    heads = _f32(x).reshape(rows, width // head_dim, head_dim)
    angles = np.asarray(positions).astype(F)[:, None] * inv_freq[None, :]  # [P, d/2]
    angles = np.concatenate([angles, angles], axis=-1)
    cos = (np.cos(angles) * F(attention_factor)).astype(F)[:, None, :]
    sin = (np.sin(angles) * F(attention_factor)).astype(F)[:, None, :]
    rotated, passed = heads[..., :rotary_dim], heads[..., rotary_dim:]
    half = rotary_dim // 2
    rotate_half = np.concatenate([-rotated[..., half:], rotated[..., :half]], axis=-1)
    out = np.concatenate([rotated * cos + rotate_half * sin, passed], axis=-1)
    return out.reshape(rows, width).astype(F)


def paged_cache_write(cache: np.ndarray, values: np.ndarray, token_lane: np.ndarray, positions: np.ndarray,
                      page_table: np.ndarray) -> np.ndarray:
    """cache[page_table[l, p // T], p % T] = values[t] for every non-padding row t; in place."""
    kv_heads, head_dim = cache.shape[2:]
    for t in range(values.shape[0]):
        lane = int(token_lane[t])
        if lane < 0:
            continue
        (page,), (slot,) = cache_slots(cache, page_table[lane], [positions[t]], lane)
        cache[page, slot] = np.asarray(values[t]).reshape(kv_heads, head_dim)
    return cache


def paged_attention(q: np.ndarray, key_cache: np.ndarray, value_cache: np.ndarray, token_lane: np.ndarray,
                    positions: np.ndarray, page_table: np.ndarray, *, scale: float,
                    sliding_window: int | None = None, softcap: float | None = None) -> np.ndarray:
    rows, width = q.shape
    kv_heads, head_dim = key_cache.shape[2], key_cache.shape[3]
    heads = width // head_dim
    group = heads // kv_heads
    out = np.zeros((rows, heads, head_dim), dtype=F)
    for t in range(rows):
        lane = int(token_lane[t])
        if lane < 0:
            continue
        position = int(positions[t])
        first = 0 if sliding_window is None else max(0, position - sliding_window + 1)
        keys = np.repeat(lane_history(key_cache, page_table[lane], first, position, lane), group, axis=1)
        values = np.repeat(lane_history(value_cache, page_table[lane], first, position, lane), group, axis=1)
        query = _f32(q[t]).reshape(heads, head_dim)
        scores = np.einsum("hd,nhd->hn", query, keys).astype(F) * F(scale)
        if softcap is not None:
            scores = F(softcap) * np.tanh(scores / F(softcap))
        scores = scores - scores.max(axis=1, keepdims=True)
        weights = np.exp(scores).astype(F)
        weights = weights / weights.sum(axis=1, keepdims=True, dtype=F)
        out[t] = np.einsum("hn,nhd->hd", weights, values)
    return out.reshape(rows, width)


def last_row_gather(x: np.ndarray, token_lane: np.ndarray, *, lanes: int) -> np.ndarray:
    x = np.asarray(x)
    out = np.zeros((lanes, *x.shape[1:]), dtype=x.dtype)
    for t in range(x.shape[0]):
        lane = int(token_lane[t])
        if 0 <= lane < lanes:
            out[lane] = x[t]  # later rows overwrite earlier ones: the last row wins
    return out


def logits(h: np.ndarray, weight: np.ndarray, *, sampled_tokens: int | None = None,
           softcap: float | None = None) -> np.ndarray:
    out = (_f32(h) @ _f32(weight).T).astype(F)
    if softcap is not None:
        out = (F(softcap) * np.tanh(out / F(softcap))).astype(F)
    if sampled_tokens is not None:
        out[:, sampled_tokens:] = -np.inf
    return out


def sample(logits: np.ndarray, seed: np.ndarray, positions: np.ndarray, parameters: np.ndarray,
           histogram: np.ndarray, grammar_mask: np.ndarray, *, draw_index: int = 0) -> np.ndarray:
    return sampling.sample(logits, seed, positions, parameters, histogram, grammar_mask, draw_index)


def argmax(logits: np.ndarray) -> np.ndarray:
    z = _f32(logits)
    z = np.where(np.isnan(z), -np.inf, z)
    return np.argmax(z, axis=1).astype(np.int32)


def copy(x: np.ndarray) -> np.ndarray:
    return np.array(x, copy=True)


def gather(x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """out[t] = x[index[t]] along the first axis; a zero row where index[t] is outside [0, rows)."""
    x = np.asarray(x)
    index = np.asarray(index, dtype=np.int64)
    valid = (index >= 0) & (index < x.shape[0])
    out = np.zeros((index.shape[0], *x.shape[1:]), dtype=x.dtype)
    out[valid] = x[index[valid]]
    return out


def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a where cond != 0, else b (elementwise; the dtype of a and b)."""
    a = np.asarray(a)
    return np.where(np.asarray(cond) != 0, a, np.asarray(b)).astype(a.dtype)


def scatter(out: np.ndarray, x: np.ndarray, index: np.ndarray) -> np.ndarray:
    """out[index[t]] = x[t] along the first axis, in place; a row whose index is outside [0, R) (a
    padding row's lane -1) is skipped. Indices of one call are distinct where they are in range."""
    index = np.asarray(index, dtype=np.int64)
    valid = (index >= 0) & (index < out.shape[0])
    out[index[valid]] = np.asarray(x)[valid]
    return out


def column_write(out: np.ndarray, value: np.ndarray, *, index: int) -> np.ndarray:
    """out[:, index] = value, in place."""
    out[:, index] = value
    return out


NUMPY_DTYPES: Mapping[int, type] = MappingProxyType({
    F32: np.float32, BF16: np.float32, F16: np.float16, F64: np.float64,
    I32: np.int32, I64: np.int64, U8: np.uint8, U32: np.uint32,
})


def fill(*, value: float, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    numpy_dtype = NUMPY_DTYPES[DTYPES_BY_NAME[dtype]]
    return np.full(shape, int(value) if np.dtype(numpy_dtype).kind in "iu" else value, dtype=numpy_dtype)


REFERENCE_OPERATORS: Mapping[str, Callable[..., np.ndarray]] = MappingProxyType({
    "embedding": embedding,
    "rms_norm": rms_norm,
    "layer_norm": layer_norm,
    "head_rms_norm": head_rms_norm,
    "matmul": matmul,
    "add": add,
    "mul": mul,
    "gated_activation": gated_activation,
    "rotary": rotary,
    "paged_cache_write": paged_cache_write,
    "paged_attention": paged_attention,
    "last_row_gather": last_row_gather,
    "logits": logits,
    "sample": sample,
    "argmax": argmax,
    "copy": copy,
    "gather": gather,
    "where": where,
    "scatter": scatter,
    "column_write": column_write,
    "token_probability": speculative.token_probability,
    "speculative_allocate": speculative.speculative_allocate,
    "speculative_pack": speculative.speculative_pack,
    "speculative_verify": speculative.speculative_verify,
    "speculative_commit": speculative.speculative_commit,
    "speculative_grammar_mask": speculative.speculative_grammar_mask,
    "copied_proposal": speculative.copied_proposal,
    "all_reduce": collectives.all_reduce,
    "all_gather": collectives.all_gather,
    "prompt_scores": scores.prompt_scores,
    "page_snapshot": snapshots.page_snapshot,
    "page_restore": snapshots.page_restore,
    "short_convolution": recurrent.short_convolution,
    "state_row_copy": recurrent.state_row_copy,
    "activation": vision.activation,
    "bidirectional_attention": vision.bidirectional_attention,
    "head_matmul": latent.head_matmul,
    "latent_attention": latent.latent_attention,
    "engram_gather": engram.engram_gather,
    "fill": fill,
})
