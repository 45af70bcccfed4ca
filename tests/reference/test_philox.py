"""Philox4x32-10 in NumPy: Random123's known-answer vectors and Triton's key/counter derivation."""

from __future__ import annotations

import numpy as np

from helios.reference import philox

# Random123 kat_vectors, philox4x32_10: (counter, key, expected output).
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]


def test_random123_known_answer_vectors():
    for counter, key, expected in KNOWN_ANSWERS:
        words = philox.philox4x32(tuple(np.uint32(c) for c in counter), tuple(np.uint32(k) for k in key))
        assert tuple(int(w) for w in words) == expected


def test_known_answers_hold_elementwise_in_arrays():
    counters = [np.array([c[i] for c, _, _ in KNOWN_ANSWERS], dtype=np.uint32) for i in range(4)]
    keys = [np.array([k[i] for _, k, _ in KNOWN_ANSWERS], dtype=np.uint32) for i in range(2)]
    words = philox.philox4x32(tuple(counters), tuple(keys))
    for row, (_, _, expected) in enumerate(KNOWN_ANSWERS):
        assert tuple(int(w[row]) for w in words) == expected


def _reference_round(c, k):
    """Random123's philox4x32round written with Python integers, independent of the NumPy code."""
    product0, product1 = 0xD2511F53 * c[0], 0xCD9E8D57 * c[2]
    return [(product1 >> 32) ^ c[1] ^ k[0], product1 & 0xFFFFFFFF, (product0 >> 32) ^ c[3] ^ k[1],
            product0 & 0xFFFFFFFF]


def _python_randint(seed: int, offset: int) -> int:
    bits = seed % 2**64
    k = [bits & 0xFFFFFFFF, bits >> 32]
    offset_bits = offset % 2**64
    c = [offset_bits & 0xFFFFFFFF, offset_bits >> 32, 0, 0]
    for _ in range(10):
        c = _reference_round(c, k)
        k = [(k[0] + 0x9E3779B9) & 0xFFFFFFFF, (k[1] + 0xBB67AE85) & 0xFFFFFFFF]
    return c[0]


def test_randint_key_and_counter_follow_triton():
    rng = np.random.default_rng(7)
    seeds = [0, 1, -1, 2**31 - 1, 2**32 + 7, 2**63 - 1, -(2**63)] + [int(s) for s in rng.integers(-2**63, 2**63 - 1, 5)]
    offsets = [0, 1, 2**32 - 1, 2**32, (5 << 32) | 3, -7] + [int(o) for o in rng.integers(-2**63, 2**63 - 1, 5)]
    for seed in seeds:
        words = philox.randint(np.full(len(offsets), seed, dtype=np.int64), np.array(offsets, dtype=np.int64))
        assert [int(w) for w in words] == [_python_randint(seed, o) for o in offsets]
        assert int(philox.randint(seed, offsets[4])) == _python_randint(seed, offsets[4])


def test_narrow_offsets_leave_the_second_counter_word_zero():
    offsets = np.array([0, 5, -3], dtype=np.int32)
    narrow = philox.randint(11, offsets, wide=False)
    expected = [_python_randint(11, int(o) % 2**32) for o in offsets]
    assert [int(w) for w in narrow] == expected


def test_rand_maps_words_to_unit_interval_like_triton():
    words = np.array([0, 1, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF], dtype=np.uint32)
    uniforms = philox.uint_to_uniform_float(words)
    assert uniforms.dtype == np.float32
    expected = [0, 1, 0x7FFFFFFF, 0x7FFFFFFF, 0]
    np.testing.assert_array_equal(uniforms, (np.array(expected, np.float32) * np.float32(4.6566127342e-10)))
    assert np.all((uniforms >= 0) & (uniforms < 1))


def test_sampling_offset_puts_the_position_in_the_high_word():
    offsets = philox.sampling_offset(np.array([0, 1, 2**31 - 1]), 5)
    assert [int(o) for o in offsets] == [5, (1 << 32) | 5, ((2**31 - 1) << 32) | 5]
