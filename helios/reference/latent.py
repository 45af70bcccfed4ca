"""The reference latent-attention operators (host side, NumPy only): `head_matmul` and
`latent_attention`, the executable definition of what a paged latent history's programs compute
(helios/program/latent.py, docs/operators.md)."""

from __future__ import annotations

import numpy as np

from helios.reference.pages import lane_history

F = np.float32


def head_matmul(x: np.ndarray, weight: np.ndarray) -> np.ndarray:
    heads, out_width, in_width = weight.shape
    rows = x.shape[0]
    xh = np.asarray(x, F).reshape(rows, heads, in_width)
    out = np.einsum("nhi,hoi->nho", xh, np.asarray(weight, F)).astype(F)
    return out.reshape(rows, heads * out_width)


def latent_attention(q_latent: np.ndarray, q_rope: np.ndarray, latent_cache: np.ndarray, rope_cache: np.ndarray,
                     token_lane: np.ndarray, positions: np.ndarray, page_table: np.ndarray, *,
                     scale: float) -> np.ndarray:
    rows = q_latent.shape[0]
    latent, rope = latent_cache.shape[3], rope_cache.shape[3]
    heads = q_latent.shape[1] // latent
    out = np.zeros((rows, heads, latent), dtype=F)
    for t in range(rows):
        lane = int(token_lane[t])
        if lane < 0:
            continue
        position = int(positions[t])
        records = lane_history(latent_cache, page_table[lane], 0, position, lane)[:, 0]  # [n, L]
        rotary_keys = lane_history(rope_cache, page_table[lane], 0, position, lane)[:, 0]  # [n, R]
        scores = (np.asarray(q_latent[t], F).reshape(heads, latent) @ records.T
                  + np.asarray(q_rope[t], F).reshape(heads, rope) @ rotary_keys.T).astype(F) * F(scale)
        scores = scores - scores.max(axis=1, keepdims=True)
        weights = np.exp(scores).astype(F)
        weights = weights / weights.sum(axis=1, keepdims=True, dtype=F)
        out[t] = weights @ records
    return out.reshape(rows, heads * latent)
