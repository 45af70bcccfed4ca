"""An independent statement of `speculative_allocate`'s rule, by brute force (host side, tests only).

Every admissible allocation is enumerated: a live lane (slot >= 0, ceiling >= 1) takes a length in
`1 .. min(ceiling, D + 1)`, a padding row 0, and the total is as large as P and the limits allow
(`min(P, sum of limits)`). A lane of length `l` holds the frontier items `k = 1 .. l - 1`, item `k`
of survival `conf[0] * ... * conf[k - 1]` (clamped FP32 confidences, FP64 products from 1.0 in
draft order). The rule's allocation is the admissible one whose items, each keyed
`(-survival, k, slot, row)` and listed best first, form the lexicographically smallest list: the
best items overall, which are prefix-closed by themselves since a survival never grows with k.
"""

from __future__ import annotations

import itertools

import numpy as np

# the quantized confidence values of the random sets: few values, so exact ties are common
QUANTA = np.array([0.0, 0.25, 0.5, 0.5, 0.75, 0.75, 1.0, 1.0, np.nan, -0.5, 1.5, 0.3, 0.6], np.float32)


def quantized_confidences(rng: np.random.Generator, lanes: int, drafts: int) -> np.ndarray:
    return rng.choice(QUANTA, size=(lanes, drafts)).astype(np.float32)


def _clean(c: np.float32) -> float:
    c = float(c)
    return 0.0 if c != c else min(max(c, 0.0), 1.0)


def allocation_oracle(confidence: np.ndarray, ceilings: np.ndarray, lane_order: np.ndarray, packed: int
                      ) -> np.ndarray:
    rows, drafts = confidence.shape
    limits, keys = [], []
    for b in range(rows):
        live = int(lane_order[b]) >= 0 and int(ceilings[b]) >= 1
        limit = min(int(ceilings[b]), drafts + 1) if live else 0
        limits.append(limit)
        survival, lane_keys = 1.0, []
        for k in range(1, limit):
            survival *= _clean(confidence[b, k - 1])  # Python floats: IEEE FP64
            lane_keys.append((-survival, k, int(lane_order[b]), b))
        keys.append(lane_keys)
    total = min(packed, sum(limits))
    best, best_list = None, None
    choices = [range(1, limit + 1) if limit else range(0, 1) for limit in limits]
    for lengths in itertools.product(*choices):
        if sum(lengths) != total:
            continue
        items = sorted(key for b, n in enumerate(lengths) for key in keys[b][:max(n - 1, 0)])
        if best_list is None or items < best_list:
            best, best_list = lengths, items
    assert best is not None, "no admissible allocation: more lanes than P"
    return np.array(best, dtype=np.int32)
