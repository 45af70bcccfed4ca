"""The sampling filters and the draw (docs/sampling.md), each rule on hand-made rows, plus the
whole `sample` operator against an independent exact-integer implementation."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from helios.program import SAMPLING_PARAMETERS
from helios.reference import philox, sampling

V = 40
ALL = np.full((V + 31) // 32, -1, dtype=np.int32)
NO_COUNTS = np.zeros(V, dtype=np.int32)


def params(**overrides: float) -> np.ndarray:
    values = {"temperature": 1.0, "top_p": 1.0, "top_k": 0.0, "min_p": 0.0, "repetition_penalty": 1.0,
              "presence_penalty": 0.0, "frequency_penalty": 0.0, **overrides}
    return np.array([values[name] for name in SAMPLING_PARAMETERS], dtype=np.float32)


def mask_of(allowed: list[int], width: int = V) -> np.ndarray:
    words = np.zeros((width + 31) // 32, dtype=np.uint32)
    for token in allowed:
        words[token // 32] |= np.uint32(1 << (token % 32))
    return words.view(np.int32)


def draws(logits, parameters, counts=NO_COUNTS, mask=ALL, n=400):
    """Tokens drawn with n different Philox words (positions 0..n-1 of seed 5)."""
    words = philox.randint(np.full(n, 5, np.int64), philox.sampling_offset(np.arange(1, n + 1)))
    return {sampling.sample_row(logits, parameters, counts, mask, int(w)) for w in words}


def test_parameter_columns_match_the_reference_constants():
    assert SAMPLING_PARAMETERS[sampling.TEMPERATURE] == "temperature"
    assert SAMPLING_PARAMETERS[sampling.TOP_K] == "top_k"
    assert SAMPLING_PARAMETERS[sampling.FREQUENCY] == "frequency_penalty"


def test_temperature_zero_is_greedy_with_the_lowest_id_on_ties():
    logits = np.zeros(V, dtype=np.float32)
    logits[[7, 3, 20]] = 2.0
    assert sampling.sample_row(logits, params(temperature=0.0), NO_COUNTS, ALL, 0xFFFFFFFF) == 3
    assert draws(logits, params(temperature=0.0)) == {3}


def test_grammar_mask_uses_the_llguidance_bit_layout_and_applies_before_truncation():
    allowed = sampling.allowed_tokens(mask_of([0, 31, 32, 39]), V)
    assert np.flatnonzero(allowed).tolist() == [0, 31, 32, 39]
    logits = np.arange(V, dtype=np.float32)  # the top tokens are the disallowed ones
    assert draws(logits, params(top_k=1.0), mask=mask_of([5, 6])) == {6}
    assert sampling.sample_row(logits, params(temperature=0.0), NO_COUNTS, mask_of([5, 6]), 0) == 6


def test_a_mask_that_allows_nothing_gives_no_token():
    logits = np.ones(V, dtype=np.float32)
    assert sampling.sample_row(logits, params(), NO_COUNTS, mask_of([]), 0) == sampling.NO_TOKEN


def test_repetition_penalty_divides_positive_and_multiplies_negative_logits_of_seen_tokens():
    logits = np.array([2.0, -2.0, 2.0, -2.0], dtype=np.float32)
    counts = np.array([1, 3, 0, 0], dtype=np.int32)
    z = sampling.penalize(logits, counts, params(repetition_penalty=2.0))
    np.testing.assert_array_equal(z, [1.0, -4.0, 2.0, -2.0])


def test_frequency_and_presence_penalties_subtract_per_count_and_per_seen_token():
    logits = np.zeros(4, dtype=np.float32)
    counts = np.array([0, 1, 3], dtype=np.int32)  # narrower histogram: token 3 counts 0
    z = sampling.penalize(logits, counts, params(frequency_penalty=0.5, presence_penalty=0.25))
    np.testing.assert_array_equal(z, [0.0, -0.75, -1.75, 0.0])


def test_top_k_keeps_the_k_largest_with_lower_ids_winning_boundary_ties():
    logits = np.zeros(V, dtype=np.float32)
    logits[[4, 9, 11, 30]] = [5.0, 5.0, 5.0, 6.0]
    assert draws(logits, params(top_k=3.0)) == {30, 4, 9}


def test_top_p_keeps_the_smallest_prefix_reaching_the_mass():
    logits = np.full(V, -np.inf, dtype=np.float32)
    logits[[1, 2, 3]] = np.log([0.5, 0.3, 0.2]).astype(np.float32)
    assert draws(logits, params(top_p=0.5)) == {1}  # mass before token 2 is 0.5, not below 0.5
    assert draws(logits, params(top_p=0.7)) == {1, 2}
    assert draws(logits, params(top_p=0.85)) == {1, 2, 3}


def test_min_p_drops_tokens_below_the_fraction_of_the_top_probability():
    logits = np.full(V, -np.inf, dtype=np.float32)
    logits[[0, 1, 2]] = np.log([0.6, 0.3, 0.1]).astype(np.float32)
    assert draws(logits, params(min_p=0.4)) == {0, 1}
    assert draws(logits, params(min_p=1.0)) == {0}


def test_temperature_sharpens_and_flattens():
    logits = np.zeros(V, dtype=np.float32)
    logits[0] = 1.0
    sharp = [sampling.sample_row(logits, params(temperature=0.01), NO_COUNTS, ALL, w) for w in range(0, 2**32, 2**26)]
    assert set(sharp) == {0}
    assert len(draws(logits, params(temperature=100.0))) > 20


def test_draw_frequencies_follow_the_softmax():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal(8).astype(np.float32)
    n = 20000
    words = philox.randint(np.full(n, 99, np.int64), philox.sampling_offset(np.arange(n)))
    counts = np.bincount([sampling.sample_row(logits, params(), NO_COUNTS, ALL[:1], int(w)) for w in words],
                         minlength=8)
    probabilities = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    expected = probabilities * n
    chi_square = float(((counts - expected) ** 2 / expected).sum())
    assert chi_square < 30.0  # 7 degrees of freedom: p < 1e-4 at this value


def _exact_sample(logits, p, counts, mask, word):
    """An independent transcription of docs/sampling.md with Python ints and Fractions."""
    z = sampling.penalize(logits, counts, p)
    allowed = [i for i in range(len(z)) if (int(mask.view(np.uint32)[i // 32]) >> (i % 32)) & 1 and z[i] > -np.inf]
    if not allowed:
        return -1
    if p[0] <= 0:
        return max(allowed, key=lambda i: (z[i], -i))
    zt = (z / np.float32(p[0])).astype(np.float32)
    top = max(zt[i] for i in allowed)
    e = {i: np.float32(1.0) if zt[i] == top else np.exp(np.float32(zt[i] - top)) for i in allowed}
    w = {i: int(np.floor(e[i] * np.float32(2**24))) for i in allowed}
    order = sorted(allowed, key=lambda i: (-zt[i], i))
    keep = order[: int(p[2])] if 0 < int(p[2]) < len(z) else order
    total = sum(w[i] for i in keep)
    threshold = Fraction(float(np.float64(np.float32(p[1])) * np.float64(total)))
    kept, before = [], 0
    for rank, i in enumerate(keep):
        if rank == 0 or before < threshold:
            kept.append(i)
        before += w[i]
    kept = [i for rank, i in enumerate(kept) if rank == 0 or e[i] >= np.float32(p[3])]
    kept.sort()
    total = sum(w[i] for i in kept)
    target = word * total // 2**32
    running = 0
    for i in kept:
        running += w[i]
        if running > target:
            return i
    raise AssertionError("unreachable")


@pytest.mark.parametrize("case", range(6))
def test_sample_operator_matches_an_exact_transcription(case):
    rng = np.random.default_rng(100 + case)
    rows, width = 5, 70
    logits = (rng.standard_normal((rows, width)) * 2).astype(np.float32)
    logits[:, 66:] = -np.inf
    seed = rng.integers(-2**63, 2**63 - 1, rows).astype(np.int64)
    positions = rng.integers(0, 5000, rows).astype(np.int32)
    parameters = np.stack([
        params(temperature=float(rng.choice([0.0, 0.5, 1.0, 1.7])), top_p=float(rng.choice([1.0, 0.9, 0.4])),
               top_k=float(rng.choice([0, 1, 5, 80])), min_p=float(rng.choice([0.0, 0.05])),
               repetition_penalty=float(rng.choice([1.0, 1.3])), presence_penalty=float(rng.choice([0.0, 0.5])),
               frequency_penalty=float(rng.choice([0.0, 0.2])))
        for _ in range(rows)
    ])
    histogram = rng.integers(0, 3, (rows, 64)).astype(np.int32)
    grammar = np.stack([mask_of(sorted(rng.choice(width, 30, replace=False).tolist()), width) for _ in range(rows)])
    ids = sampling.sample(logits, seed, positions, parameters, histogram, grammar, draw_index=case)
    words = philox.randint(seed, philox.sampling_offset(positions.astype(np.int64) + 1, case))
    expected = [_exact_sample(logits[b], parameters[b], histogram[b], grammar[b], int(words[b])) for b in range(rows)]
    assert ids.dtype == np.int32
    assert ids.tolist() == expected


def test_rows_are_independent_of_their_neighbours():
    rng = np.random.default_rng(5)
    logits = rng.standard_normal((4, V)).astype(np.float32)
    seed = np.array([1, 2, 3, 4], np.int64)
    positions = np.array([10, 20, 30, 40], np.int32)
    parameters = np.stack([params()] * 4)
    histogram = np.zeros((4, V), np.int32)
    grammar = np.tile(ALL, (4, 1))
    together = sampling.sample(logits, seed, positions, parameters, histogram, grammar)
    alone = [sampling.sample(logits[b:b + 1], seed[b:b + 1], positions[b:b + 1], parameters[b:b + 1],
                             histogram[b:b + 1], grammar[b:b + 1])[0] for b in range(4)]
    assert together.tolist() == alone
