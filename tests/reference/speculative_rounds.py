"""A round of many one-proposal lanes over one fixed target row and one fixed draft row (host side,
tests only): the operator-level losslessness check of `speculative_verify` and its production twin.

Lane `b` is one request seed: its pending token at position `consumed`, one proposal drawn as a
speculative program draws it (`sample` with draw_index 1 over the draft logits, so the proposal's
position is `consumed + 1`), and two target rows (the proposal's judge, then the bonus row).
"""

from __future__ import annotations

import math

import numpy as np

from helios.program.speculative import PROPOSAL_DRAW
from helios.reference import sampling
from helios.reference.operators import sample

VOCAB = 6
PROBABILITY_BITS = 32  # Q(x) << 32 of the wrong rule, as the reference shifts P(x)
CONSUMED = 41  # every lane's pending position


def fixed_logits() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(target [V], draft [V], parameters [7]): fixed random logits far enough apart that the draft
    alone is a poor sampler of the target; temperature 0.9 and top-k 5 (one id filtered away)."""
    rng = np.random.default_rng(20261201)
    target = (rng.standard_normal(VOCAB) * 1.5).astype(np.float32)
    draft = (rng.standard_normal(VOCAB) * 1.0).astype(np.float32)
    parameters = np.array([0.9, 1.0, 5, 0.0, 1.0, 0.0, 0.0], np.float32)
    return target, draft, parameters


def target_distribution() -> np.ndarray:
    """p: the target's filtered distribution (kept / total), FP64."""
    target, _, parameters = fixed_logits()
    kept = sampling.row_weights(target, parameters).astype(np.float64)
    return kept / kept.sum()


def one_proposal_round(lanes: int, first_seed: int = 0):
    """The inputs of `speculative_verify` (verify_tokens 2) for `lanes` seeds."""
    target, draft, row = fixed_logits()
    seed = np.random.default_rng(first_seed).integers(-2**63, 2**63 - 1, size=lanes, dtype=np.int64)
    consumed = np.full(lanes, CONSUMED, np.int32)
    parameters = np.tile(row, (lanes, 1))
    histogram = np.zeros((lanes, 1), np.int32)
    mask = np.full((lanes, 1), -1, np.int32)
    draft_logits = np.tile(draft, (lanes, 1, 1))
    proposals = sample(draft_logits[:, 0], seed, consumed, parameters, histogram, mask, draw_index=PROPOSAL_DRAW)
    candidates = np.stack([np.zeros(lanes, np.int32), proposals], axis=1).astype(np.int32)
    logits = np.tile(target, (2 * lanes, 1))
    lengths = np.full(lanes, 2, np.int32)
    return logits, draft_logits, candidates, lengths, consumed, seed, parameters, histogram, mask


def inverted_acceptance(p_x: int, q_x: int, word: int) -> bool:
    """A deliberately wrong acceptance rule, min(1, q / p) (the ratio upside down), in the fixed
    point of `helios.reference.speculative.accepts`: what a losslessness test must reject."""
    return q_x >= p_x or word * p_x < q_x << PROBABILITY_BITS


def chi_square_survival(statistic: float, dof: int) -> float:
    """P(X >= statistic) for X chi-square with `dof` degrees of freedom: the regularized upper
    incomplete gamma Q(dof / 2, statistic / 2), by its series below a + 1 and Lentz's continued
    fraction above (Numerical Recipes, section 6.2)."""
    a, x = dof / 2.0, statistic / 2.0
    if x <= 0:
        return 1.0
    log_front = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:
        term = total = 1.0 / a
        n = a
        while abs(term) > abs(total) * 1e-16:
            n += 1
            term *= x / n
            total += term
        return max(0.0, 1.0 - total * math.exp(log_front))
    tiny = 1e-300
    b = x + 1 - a
    c, d = 1 / tiny, 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = tiny if abs(d) < tiny else d
        c = b + an / c
        c = tiny if abs(c) < tiny else c
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-16:
            break
    return math.exp(log_front) * h
