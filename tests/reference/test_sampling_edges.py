"""Edge cases of docs/sampling.md, each as the document states it: top_k at or beyond the vocabulary,
top_p = 1, min_p = 0, temperature 0 with penalties, rows the grammar masks completely, NaN logits."""

from __future__ import annotations

import numpy as np
import pytest

from helios.program import SAMPLING_PARAMETERS
from helios.reference import philox, sampling

V = 37  # not a multiple of 32: the mask's last word is partial
ALL = np.full((V + 31) // 32, -1, dtype=np.int32)
NO_COUNTS = np.zeros(V, dtype=np.int32)
WORDS = [int(w) for w in philox.randint(np.full(300, 11, np.int64), philox.sampling_offset(np.arange(1, 301)))]
WORDS += [0, 1, 2**31, 2**32 - 1]


def params(**overrides: float) -> np.ndarray:
    values = {"temperature": 1.0, "top_p": 1.0, "top_k": 0.0, "min_p": 0.0, "repetition_penalty": 1.0,
              "presence_penalty": 0.0, "frequency_penalty": 0.0, **overrides}
    return np.array([values[name] for name in SAMPLING_PARAMETERS], dtype=np.float32)


def draw_all(logits, parameters, counts=NO_COUNTS, mask=ALL) -> list[int]:
    return [sampling.sample_row(logits, parameters, counts, mask, w) for w in WORDS]


def unfiltered(logits, word: int) -> int:
    """The draw over every token's fixed-point weight, in id order (no filter at all)."""
    z = logits.astype(np.float32)
    top = z.max()
    e = np.where(z == top, np.float32(1), np.exp((z - top).astype(np.float32))).astype(np.float32)
    weights = np.floor(e * np.float32(2**24)).astype(np.int64)
    target = (word * int(weights.sum())) >> 32
    return int(np.searchsorted(np.cumsum(weights), target, side="right"))


LOGITS = np.random.default_rng(3).standard_normal(V).astype(np.float32) * 3


@pytest.mark.parametrize("top_k", [float(V), float(V + 1), 1e9])
def test_top_k_at_or_beyond_the_vocabulary_filters_nothing(top_k):
    assert draw_all(LOGITS, params(top_k=top_k)) == draw_all(LOGITS, params(top_k=0.0))


def test_top_k_one_below_the_vocabulary_drops_exactly_the_last_rank():
    kept = set(draw_all(LOGITS, params(top_k=float(V - 1), temperature=50.0)))
    assert int(np.argmin(LOGITS)) not in kept and len(kept) == V - 1


def test_top_p_one_and_min_p_zero_are_the_unfiltered_draw():
    expected = [unfiltered(LOGITS, w) for w in WORDS]
    assert draw_all(LOGITS, params(top_p=1.0, min_p=0.0)) == expected


def test_top_p_one_keeps_every_token_of_positive_weight_and_no_other():
    logits = np.full(V, -np.inf, dtype=np.float32)
    logits[[2, 5]] = [0.0, -1.0]
    logits[9] = -20.0  # exp(-20) * 2^24 < 1: weight 0, never drawn
    drawn = set(draw_all(logits, params(top_p=1.0)))
    assert drawn == {2, 5}
    words_near_the_top = [2**32 - 1 - i for i in range(64)]
    assert {sampling.sample_row(logits, params(), NO_COUNTS, ALL, w) for w in words_near_the_top} == {5}


def test_temperature_zero_applies_penalties_before_the_greedy_choice():
    logits = np.zeros(V, dtype=np.float32)
    logits[[4, 8]] = [3.0, 2.0]
    counts = np.zeros(V, dtype=np.int32)
    counts[4] = 2  # token 4 was seen twice
    assert sampling.sample_row(logits, params(temperature=0.0), counts, ALL, 0) == 4
    penalized = params(temperature=0.0, repetition_penalty=2.0)  # 3 / 2 = 1.5 < 2
    assert sampling.sample_row(logits, penalized, counts, ALL, 0) == 8
    frequency = params(temperature=0.0, frequency_penalty=0.5)  # 3 - 2 * 0.5 = 2: a tie, the lower id wins
    assert sampling.sample_row(logits, frequency, counts, ALL, 0) == 4
    presence = params(temperature=0.0, presence_penalty=1.5)  # 3 - 1.5 = 1.5 < 2
    assert sampling.sample_row(logits, presence, counts, ALL, 0) == 8


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_completely_masked_row_gives_no_token_at_any_temperature(temperature):
    nothing = np.zeros_like(ALL)
    assert set(draw_all(LOGITS, params(temperature=temperature), mask=nothing)) == {sampling.NO_TOKEN}


def test_a_row_whose_only_allowed_tokens_are_minus_infinity_gives_no_token():
    logits = LOGITS.copy()
    logits[33:] = -np.inf  # padding columns of a padded vocabulary
    allowed = np.zeros_like(ALL)
    allowed[1] = np.int32(0b1110)  # ids 33, 34, 35 only
    assert set(draw_all(logits, params(), mask=allowed)) == {sampling.NO_TOKEN}


def test_nan_logits_are_never_drawn():
    logits = LOGITS.copy()
    logits[[0, 7, 30]] = np.nan
    assert not {0, 7, 30} & set(draw_all(logits, params(temperature=5.0)))
    assert sampling.sample_row(logits, params(temperature=0.0), NO_COUNTS, ALL, 0) not in (0, 7, 30)
