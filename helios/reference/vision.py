"""The reference vision-encoder operators (host side, NumPy only): `activation` and
`bidirectional_attention`, the executable definition of what a vision encoder's programs compute
(helios/program/vision.py, docs/operators.md)."""

from __future__ import annotations

import math

import numpy as np

F = np.float32
_erf = np.vectorize(math.erf, otypes=[np.float64])


def activation(x: np.ndarray, *, activation: str) -> np.ndarray:
    """act(x) in FP32: silu, gelu (erf), gelu_tanh or quick_gelu (x * sigmoid(1.702 x))."""
    g = np.asarray(x, F)
    with np.errstate(over="ignore"):
        if activation == "silu":
            out = g / (F(1) + np.exp(-g))
        elif activation == "quick_gelu":
            out = g / (F(1) + np.exp(F(-1.702) * g))
        elif activation == "gelu":
            out = F(0.5) * g * (F(1) + _erf(g / np.sqrt(F(2))).astype(F))
        elif activation == "gelu_tanh":
            inner = F(math.sqrt(2.0 / math.pi)) * (g + F(0.044715) * g * g * g)
            out = F(0.5) * g * (F(1) + np.tanh(inner))
        else:
            raise ValueError(f"unknown activation {activation!r}")
    return np.asarray(out, F)


def bidirectional_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, group: np.ndarray, *,
                            scale: float, head_dim: int) -> np.ndarray:
    """Each row of group g >= 0 attends every row of group g; rows of a negative group give zeros."""
    rows = q.shape[0]
    heads, kv_heads = q.shape[1] // head_dim, k.shape[1] // head_dim
    qh = np.asarray(q, F).reshape(rows, heads, head_dim)
    kh = np.asarray(k, F).reshape(rows, kv_heads, head_dim)
    vh = np.asarray(v, F).reshape(rows, kv_heads, head_dim)
    group = np.asarray(group, np.int64)
    out = np.zeros((rows, heads, head_dim), F)
    for g in sorted(set(group[group >= 0].tolist())):
        members = np.flatnonzero(group == g)
        for h in range(heads):
            kv = h // (heads // kv_heads)
            scores = (qh[members, h] @ kh[members, kv].T) * F(scale)  # [n, n]
            scores = scores - scores.max(axis=1, keepdims=True)
            weights = np.exp(scores)
            weights = weights / weights.sum(axis=1, keepdims=True, dtype=F)
            out[members, h] = weights @ vh[members, kv]
    return out.reshape(rows, heads * head_dim)
