"""The statistic of the whole-request losslessness tests (tests/reference/sampled_requests.py): the
partition of the sequence space is fixed by the expected counts alone, covers every sequence once,
pools only sequences of one prefix and gives every cell at least the minimum expected count; the
goodness of fit accepts 20,000 sequences drawn from the distribution itself and rejects sequences
whose last token alone is drawn from a distribution 10% off."""

from __future__ import annotations

import numpy as np

from tests.reference.sampled_requests import MINIMUM_EXPECTED, SIGNIFICANCE, goodness_of_fit, partition

SHAPE = (8, 8, 8, 8)


def _distribution(rng: np.random.Generator) -> np.ndarray:
    """A spread joint distribution over SHAPE: a product of random conditionals."""
    conditional = rng.dirichlet(np.full(SHAPE[0], 1.5), size=int(np.prod(SHAPE[:-1]))).reshape(SHAPE)
    marginal = rng.dirichlet(np.full(SHAPE[0], 1.5), size=int(np.prod(SHAPE[:-2]))).reshape(SHAPE[:-1])
    return marginal[..., None] * conditional / marginal.sum()


def _draw(rng: np.random.Generator, probability: np.ndarray, count: int) -> np.ndarray:
    flat = rng.choice(probability.size, size=count, p=probability.reshape(-1) / probability.sum())
    return np.stack(np.unravel_index(flat, probability.shape), axis=1)


def test_the_partition_covers_every_sequence_once_with_enough_expected():
    rng = np.random.default_rng(3)
    expected = _distribution(rng) * 20_000
    cell = partition(expected)
    assert (cell >= 0).all()
    due = np.bincount(cell, weights=expected.reshape(-1))
    assert due.min() >= MINIMUM_EXPECTED
    assert expected.max() >= MINIMUM_EXPECTED and due.size > 100  # sequences of their own, and pools
    # a pooled cell holds the sequences of one prefix only: the longest prefix its members share
    # holds every member of the cell that shares it (the leftover may join one other cell)
    for number in np.flatnonzero(np.bincount(cell) > 1)[:50]:
        members = np.stack(np.unravel_index(np.flatnonzero(cell == number), SHAPE), axis=1)
        assert len({tuple(m[:1]) for m in members}) <= 2


def test_the_fit_accepts_its_own_distribution_and_rejects_a_perturbed_one():
    rng = np.random.default_rng(4)
    probability = _distribution(rng)
    fit = goodness_of_fit(_draw(rng, probability, 20_000), probability)
    assert fit.p_value > SIGNIFICANCE, str(fit)
    off = 0.8 * probability + 0.2 * probability[..., ::-1]  # the last token's conditional mixed 20% with its reverse
    assert np.isclose(off.sum(), 1.0)
    fit = goodness_of_fit(_draw(rng, off, 20_000), probability)
    assert fit.p_value < SIGNIFICANCE, str(fit)
