"""The sampling kernels against `helios.reference.sampling` on random rows: every filter, the grammar
mask, greedy rows, rows the mask empties, and the Philox draw."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import sampling
from helios.reference import operators as ref
from tests.production.helpers import DEVICE, tensor

ROWS, VOCAB = 12, 300


def _inputs(rng: np.random.Generator):
    logits = (rng.standard_normal((ROWS, VOCAB)) * 3).astype(np.float32)
    logits[0, :5] = logits[0, 5]  # ties at the top
    logits[1, 7] = np.nan
    seed = rng.integers(-(2**63), 2**63 - 1, size=ROWS, dtype=np.int64)
    positions = rng.integers(0, 5000, size=ROWS).astype(np.int32)
    parameters = np.zeros((ROWS, 7), np.float32)
    parameters[:, 0] = rng.choice([0.0, 0.5, 1.0, 1.7], size=ROWS)  # temperature
    parameters[:, 1] = rng.choice([1.0, 0.9, 0.3], size=ROWS)  # top_p
    parameters[:, 2] = rng.choice([0, 1, 5, 40, VOCAB + 3], size=ROWS)  # top_k
    parameters[:, 3] = rng.choice([0.0, 0.05, 0.5], size=ROWS)  # min_p
    parameters[:, 4] = rng.choice([1.0, 1.3, 0.8], size=ROWS)  # repetition
    parameters[:, 5] = rng.choice([0.0, 0.7], size=ROWS)  # presence
    parameters[:, 6] = rng.choice([0.0, 0.2], size=ROWS)  # frequency
    parameters[2, 0] = 1.0  # at least one sampled row with no filter
    parameters[2, 1:4] = (1.0, 0, 0)
    histogram = rng.integers(0, 3, size=(ROWS, VOCAB - 20)).astype(np.int32)
    words = rng.integers(0, 2**32, size=(ROWS, (VOCAB + 31) // 32), dtype=np.uint64)
    words[rng.random(ROWS) < 0.4] = 2**32 - 1
    words[3] = 0  # a row the grammar mask empties
    words[4] = 0
    words[4, 2] = 1 << 5 | 1 << 9  # two allowed tokens
    grammar_mask = words.astype(np.uint32).view(np.int32)
    return logits, seed, positions, parameters, histogram, grammar_mask


@pytest.mark.parametrize("draw_index", [0, 3])
def test_sample_matches_the_reference(draw_index):
    rng = np.random.default_rng()
    logits, seed, positions, parameters, histogram, grammar_mask = _inputs(rng)
    sampler = sampling.Sampler(ROWS, VOCAB, DEVICE, block=128)
    out = torch.empty(ROWS, dtype=torch.int32, device=DEVICE)
    sampler(tensor(logits, torch.float32), tensor(seed), tensor(positions), tensor(parameters, torch.float32),
            tensor(histogram), tensor(grammar_mask), out, draw_index=draw_index)
    expected = ref.sample(logits, seed, positions, parameters, histogram, grammar_mask, draw_index=draw_index)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    assert expected[3] == -1


def test_without_the_rank_stage_rows_that_filter_nothing_draw_the_same():
    """A round none of whose rows filters by rank (top-k 0, top-p 1, min-p 0) may skip the rank stage:
    every row still draws the reference's token, greedy rows and rows the mask empties included."""
    rng = np.random.default_rng()
    logits, seed, positions, parameters, histogram, grammar_mask = _inputs(rng)
    parameters[:, 1:4] = (1.0, 0.0, 0.0)
    switch = sampling.RankFilters()
    sampler = sampling.Sampler(ROWS, VOCAB, DEVICE, block=128, rank_filters=switch)
    out = torch.empty(ROWS, dtype=torch.int32, device=DEVICE)
    switch.enabled = False
    sampler.order.fill_(-5)
    sampler(tensor(logits, torch.float32), tensor(seed), tensor(positions), tensor(parameters, torch.float32),
            tensor(histogram), tensor(grammar_mask), out, draw_index=1)
    expected = ref.sample(logits, seed, positions, parameters, histogram, grammar_mask, draw_index=1)
    np.testing.assert_array_equal(out.cpu().numpy(), expected)
    assert (sampler.order == -5).all()  # the rank stage (sort, gather, scatter) did not run
    assert expected[3] == -1 and (parameters[:, 0] > 0).any()


def test_argmax_lowest_index_and_nan_never_wins():
    rng = np.random.default_rng()
    logits = rng.standard_normal((5, 1000)).astype(np.float32)
    logits[0, 10] = logits[0, 900] = 50.0
    logits[1, 3] = np.nan
    out = torch.empty(5, dtype=torch.int32, device=DEVICE)
    sampling.argmax(tensor(logits, torch.float32), out, block=256)
    np.testing.assert_array_equal(out.cpu().numpy(), ref.argmax(logits))
