"""Sampled speculative verification is lossless at the operator level: over 20,000 seeds (one lane
each, in one batched call), the first token `speculative_verify` emits after a proposal drawn from
the draft is distributed as the target's filtered distribution p (chi-square, p-value > 0.001),
whatever the draft. The same test rejects a deliberately wrong acceptance rule, min(1, q / p)."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest

from helios.reference import speculative as spec
from tests.reference.speculative_rounds import (
    VOCAB,
    chi_square_survival,
    inverted_acceptance,
    one_proposal_round,
    target_distribution,
)

SEEDS = 20_000
SIGNIFICANCE = 0.001


@functools.cache
def _round():
    return one_proposal_round(SEEDS)


def p_value(tokens: np.ndarray) -> tuple[float, np.ndarray]:
    """(the chi-square p-value of `tokens` against p, their counts); an id of p = 0 among them fails
    outright (it would make the statistic infinite)."""
    counts = np.bincount(tokens, minlength=VOCAB)
    p = target_distribution()
    support = p > 0
    if counts[~support].any():
        return 0.0, counts
    expected = p[support] * len(tokens)
    statistic = float(((counts[support] - expected) ** 2 / expected).sum())
    return chi_square_survival(statistic, int(support.sum()) - 1), counts


def first_tokens() -> np.ndarray:
    ids, _ = spec.speculative_verify(*_round(), verify_tokens=2)
    return ids[:, 0]


def test_the_first_emitted_token_follows_the_target_distribution():
    value, counts = p_value(first_tokens())
    assert value > SIGNIFICANCE, (value, counts.tolist(), target_distribution().tolist())
    # the proposals alone fail: verification, not the draft, gives the target's distribution
    proposals = _round()[2][:, 1]
    assert p_value(proposals)[0] < SIGNIFICANCE


def test_a_wrong_acceptance_rule_fails_the_same_test(monkeypatch):
    monkeypatch.setattr(spec, "accepts", inverted_acceptance)
    value, counts = p_value(first_tokens())
    assert value < SIGNIFICANCE, (value, counts.tolist())


@pytest.mark.parametrize(("statistic", "dof", "expected"), [
    (11.0705, 5, 0.05), (20.5150, 5, 0.001), (3.8415, 1, 0.05), (6.6349, 1, 0.01), (0.5543, 5, 0.99),
    (1.0, 2, math.exp(-0.5)), (7.0, 2, math.exp(-3.5)), (3.0, 4, math.exp(-1.5) * 2.5), (40.0, 4, math.exp(-20) * 21),
])
def test_the_chi_square_survival_function(statistic, dof, expected):
    """Table values (dof 1 and 5), and the closed forms of even dof: exp(-x/2) for 2, exp(-x/2)(1 + x/2) for 4."""
    assert chi_square_survival(statistic, dof) == pytest.approx(expected, rel=2e-4)
