"""Copied proposals keep sampled speculation lossless at the operator level: over 20,000 seeds (one
lane each), a proposal copied from history (`copied_proposal`: the copied id, judged as drawn from a
one-hot row) and verified by `speculative_verify` leaves the first emitted token distributed as the
target's filtered distribution p (chi-square, p-value > 0.001), whichever id was copied, one the
target's filters drop included. Judging the copied id against the draft's own row instead (the
mistake the one-hot row exists to prevent) fails the same test, already over 5,000 seeds."""

from __future__ import annotations

import numpy as np

from helios.reference import speculative as spec
from tests.reference.speculative_rounds import (
    VOCAB,
    chi_square_survival,
    one_proposal_round,
    target_distribution,
)

SEEDS = 20_000
SIGNIFICANCE = 0.001


def _copied_round(one_hot: bool, seeds: int = SEEDS):
    logits, draft_logits, candidates, lengths, consumed, seed, parameters, histogram, mask = one_proposal_round(
        seeds, first_seed=11)
    copied_ids = (np.arange(seeds) % VOCAB).astype(np.int32)[:, None]  # every id copied by some lanes
    drawn = candidates[:, 1].copy()
    token, row = spec.copied_proposal(drawn, draft_logits[:, 0], copied_ids, np.ones(seeds, np.int32), index=0)
    assert (token == copied_ids[:, 0]).all()
    candidates[:, 1] = token
    judged = row if one_hot else draft_logits[:, 0]
    ids, _ = spec.speculative_verify(logits, judged[:, None, :], candidates, lengths, consumed, seed, parameters,
                                     histogram, mask, verify_tokens=2)
    return ids[:, 0]


def _p_value(tokens: np.ndarray) -> tuple[float, list[int]]:
    counts = np.bincount(tokens, minlength=VOCAB)
    p = target_distribution()
    support = p > 0
    if counts[~support].any():
        return 0.0, counts.tolist()
    expected = p[support] * len(tokens)
    statistic = float(((counts[support] - expected) ** 2 / expected).sum())
    return chi_square_survival(statistic, int(support.sum()) - 1), counts.tolist()


def test_copied_proposals_leave_the_first_token_distributed_as_the_target():
    value, counts = _p_value(_copied_round(one_hot=True))
    assert value > SIGNIFICANCE, (value, counts, target_distribution().tolist())


def test_judging_a_copied_id_by_the_draft_row_fails_the_same_test():
    # already over the first 5,000 seeds (a quarter of the lossless test's, a quarter of its time)
    value, counts = _p_value(_copied_round(one_hot=False, seeds=5_000))
    assert value < SIGNIFICANCE, (value, counts)


def test_the_copied_run_stops_at_the_count_and_at_an_id_outside_the_row():
    ids = np.array([[3, 4, 5], [3, 9, 5], [3, 4, 5], [3, 4, 5]], np.int32)
    count = np.array([3, 3, 1, -2], np.int32)
    assert spec.copied_run(ids, count, 8).tolist() == [3, 1, 1, 0]
    drawn = np.array([7, 7, 7, 7], np.int32)
    rows = np.zeros((4, 8), np.float32)
    token, logits = spec.copied_proposal(drawn, rows, ids, count, index=1)
    assert token.tolist() == [4, 7, 7, 7]
    assert logits[0, 4] == 0 and np.isneginf(np.delete(logits[0], 4)).all()
    assert (logits[1:] == 0).all()  # past the run: the draft's row, unchanged
