"""The prompt-score launch (`helios.production.kernels.scores`) against the reference definition, on
fresh random logits, alone and with its workspaces shared with samplers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import sampling
from helios.production.kernels.scores import PromptScorer
from helios.reference import operators as ref
from helios.reference.scores import prompt_scores
from tests.production.helpers import DEVICE, tensor

VOCAB, TOP = 300, 5


def _scored(scorer: PromptScorer, logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = logits.shape[0]
    scores = torch.full((rows + 2, TOP + 1), 7.0, dtype=torch.float32, device=DEVICE)
    ids = torch.full((rows + 2, TOP), -3, dtype=torch.int64, device=DEVICE)
    scorer(tensor(logits, torch.float32), tensor(targets), scores, ids)
    return scores.cpu().numpy(), ids.cpu().numpy()


def _expected(logits: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = logits.shape[0]
    scores = np.full((rows + 2, TOP + 1), 7.0, dtype=np.float32)
    ids = np.full((rows + 2, TOP), -3, dtype=np.int64)
    return prompt_scores(scores, ids, logits, targets)


def _logits(rng: np.random.Generator, rows: int) -> tuple[np.ndarray, np.ndarray]:
    logits = (rng.standard_normal((rows, VOCAB)) * 3).astype(np.float32)
    logits[0, 5] = logits[0, 40]  # a tie: the lower id ranks first
    logits[-1, VOCAB - 20:] = -np.inf  # columns past the sampled vocabulary
    targets = rng.integers(0, VOCAB, size=rows).astype(np.int64)
    targets[0], targets[-1] = -1, VOCAB  # nothing to score on those rows
    return logits, targets


@pytest.mark.parametrize("group", [256, 4], ids=["one-group", "groups-of-4"])
def test_prompt_scores_equal_the_reference_and_keep_rows_past_the_chunk(group, monkeypatch):
    """9 rows scored at once, or a group of 4 at a time over workspaces of 4 rows (the last partial)."""
    monkeypatch.setattr(sampling, "SORT_ROWS", group)
    rng = np.random.default_rng()
    logits, targets = _logits(rng, 9)
    scorer = PromptScorer(9, VOCAB, TOP, torch.device(DEVICE))
    assert scorer.lp.shape == (min(group, 9), VOCAB)
    scores, ids = _scored(scorer, logits, targets)
    want_scores, want_ids = _expected(logits, targets)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)


def test_scorers_share_the_samplers_storage_and_each_equals_the_reference():
    """Scorers of two row counts and a sampler over one `SamplerStorage`, run in turn over what the one
    before left in the shared rows: each scores (or draws) as the reference does, and the storage
    holds the most rows of each buffer once."""
    rng = np.random.default_rng()
    storage = sampling.SamplerStorage(DEVICE)
    scorers = [PromptScorer(rows, VOCAB, TOP, torch.device(DEVICE), storage) for rows in (4, 11)]
    sampler = sampling.Sampler(6, VOCAB, DEVICE, block=128, storage=storage, rank_form="sort")
    alone = sampling.Sampler(6, VOCAB, DEVICE, block=128, rank_form="sort").storage.bytes
    # the scorers' rows are the sampler's z, e, sorted_z (f32) and order (i64) rows, as many as the most
    assert storage.bytes == alone + (11 - 6) * VOCAB * (4 + 4 + 4 + 8)
    assert scorers[0].lp.data_ptr() == scorers[1].lp.data_ptr() == sampler.z.data_ptr()
    for scorer in (scorers[1], scorers[0], sampler, scorers[1]):
        if isinstance(scorer, PromptScorer):
            logits, targets = _logits(rng, scorer.rows)
            scores, ids = _scored(scorer, logits, targets)
            want_scores, want_ids = _expected(logits, targets)
            np.testing.assert_array_equal(ids, want_ids)
            np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
            continue
        rows = scorer.rows
        logits = rng.standard_normal((rows, VOCAB)).astype(np.float32)
        seed = rng.integers(-(2**63), 2**63 - 1, size=rows, dtype=np.int64)
        positions = rng.integers(0, 5000, size=rows).astype(np.int32)
        parameters = np.zeros((rows, 7), np.float32)  # temperature, top-p, top-k, min-p, penalties
        parameters[:, :5] = (0.8, 0.9, 40, 0.0, 1.0)
        histogram = np.zeros((rows, VOCAB), dtype=np.int32)
        grammar_mask = np.full((rows, (VOCAB + 31) // 32), -1, dtype=np.int32)  # every token allowed
        inputs = (logits, seed, positions, parameters, histogram, grammar_mask)
        out = torch.empty(rows, dtype=torch.int32, device=DEVICE)
        scorer(tensor(logits, torch.float32), tensor(seed), tensor(positions), tensor(parameters, torch.float32),
               tensor(histogram), tensor(grammar_mask), out)
        np.testing.assert_array_equal(out.cpu().numpy(), ref.sample(*inputs))
