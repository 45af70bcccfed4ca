"""The reference recurrent-state operators (host side, NumPy only): `short_convolution` and
`state_row_copy`, the executable definition of what a recurrent history's programs do with its
state rows (helios/program/recurrent.py, docs/operators.md)."""

from __future__ import annotations

import numpy as np


def _lanes(token_lane: np.ndarray, lanes: int) -> dict[int, list[int]]:
    """The packed rows of each lane in [0, lanes), in packed order (padding rows belong to none)."""
    rows: dict[int, list[int]] = {}
    for t, lane in enumerate(np.asarray(token_lane).tolist()):
        if 0 <= lane < lanes:
            rows.setdefault(lane, []).append(t)
    return rows


def short_convolution(state: np.ndarray, x: np.ndarray, weight: np.ndarray, token_lane: np.ndarray,
                      positions: np.ndarray, state_rows: np.ndarray,
                      bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(state, out): each lane's rows convolved with its history, its state row then its last K-1
    inputs (state updated in place)."""
    taps = weight.shape[2]
    filters = weight[:, 0, :].astype(np.float32)  # [C, K]
    out = np.zeros(x.shape, np.float32)
    for lane, rows in _lanes(token_lane, state_rows.shape[0]).items():
        row = int(state_rows[lane])
        first = int(positions[rows[0]])
        history = np.zeros((taps - 1, x.shape[1]), np.float32)
        if 0 <= row < state.shape[0]:
            history[...] = state[row]
        # history[i] is the input at position first - (K-1) + i; positions before 0 are zero
        history[: max(0, taps - 1 - first)] = 0.0
        inputs = np.concatenate([history, x[rows].astype(np.float32)])
        for k, t in enumerate(rows):
            out[t] = np.einsum("kc,ck->c", inputs[k:k + taps], filters, dtype=np.float32)
            if bias is not None:
                out[t] += bias.astype(np.float32)
        if 0 <= row < state.shape[0]:
            state[row] = inputs[len(rows):]
    return state, out


def state_row_copy(state: np.ndarray, source: np.ndarray, destination: np.ndarray) -> np.ndarray:
    """state[destination[b]] = state[source[b]] where both rows lie in the state, reads first."""
    pairs = [(s, d) for s, d in zip(np.asarray(source).tolist(), np.asarray(destination).tolist(), strict=True)
             if 0 <= s < state.shape[0] and 0 <= d < state.shape[0]]
    payloads = [state[s].copy() for s, _ in pairs]
    for (_, d), payload in zip(pairs, payloads, strict=True):
        state[d] = payload
    return state
