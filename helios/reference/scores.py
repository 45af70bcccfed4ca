"""The prompt-score operator, executable (host side, NumPy only): `prompt_scores` (version 4).

The definition both runtimes are held to (docs/operators.md, "Prompt scores"): for packed row t of
f32 logits `[P, V]`, the log-softmax `lp = (x - max(x)) - log(sum(exp(x - max(x))))` in FP32
(columns at -inf, past the sampled vocabulary, score -inf and are never chosen ahead of a finite
one); `scores[t, 0] = lp[targets[t]]`, 0 for a target outside `[0, V)` (a row with nothing to
score: the prompt's last token, a pending token, padding); `ids[t, :]` the K ids of highest `lp`
in decreasing order, the lower id first on ties, and `scores[t, 1:]` their `lp`. Rows at or past P
of the two outputs keep their values.
"""

from __future__ import annotations

import numpy as np

F = np.float32


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise FP32 log-softmax, in the operator's order of operations."""
    x = np.asarray(logits, dtype=F)
    shifted = (x - x.max(axis=1, keepdims=True)).astype(F)
    total = np.exp(shifted, dtype=F).sum(axis=1, dtype=F, keepdims=True)
    return (shifted - np.log(total, dtype=F)).astype(F)


def prompt_scores(scores: np.ndarray, ids: np.ndarray, logits: np.ndarray,
                  targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """In place: rows [0, P) of `scores` [R, K + 1] and `ids` [R, K] (see the module docstring)."""
    rows, width = np.shape(logits)
    top = ids.shape[1]
    lp = log_softmax(logits)
    # a stable sort of -lp: decreasing log-probability, the lower id first among equal ones
    order = np.argsort(-lp, axis=1, kind="stable")[:, :top]
    targets = np.asarray(targets, dtype=np.int64)
    valid = (targets >= 0) & (targets < width)
    picked = lp[np.arange(rows), np.where(valid, targets, 0)]
    scores[:rows, 0] = np.where(valid, picked, F(0))
    scores[:rows, 1:] = np.take_along_axis(lp, order, axis=1)
    ids[:rows] = order.astype(ids.dtype)
    return scores, ids
