"""The reference Engram operator (host side, NumPy only): `engram_gather`, the executable definition
of how a program reads the rows an Engram table's host gatherer staged (helios/program/engram.py,
docs/operators.md, docs/engram.md)."""

from __future__ import annotations

import numpy as np


def engram_gather(staging: np.ndarray, row_index: np.ndarray, *, packed_tokens: int) -> np.ndarray:
    """out[t, o*W:(o+1)*W] = the staging row row_index[t, o] of its F * S rows (zeros outside), for
    the leading `packed_tokens` rows of the row index."""
    frames, rows, width = staging.shape
    flat = np.asarray(staging, dtype=np.float32).reshape(frames * rows, width)
    index = np.asarray(row_index, dtype=np.int64)[:packed_tokens]
    valid = (index >= 0) & (index < frames * rows)
    out = np.zeros((*index.shape, width), dtype=np.float32)
    out[valid] = flat[index[valid]]
    return out.reshape(index.shape[0], index.shape[1] * width)
