"""Rotary (fused with the cache write), the paged cache write and paged attention against the reference
operators, on random cohorts with shuffled pages, grouped-query heads, windows and soft-caps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import attention, rotary
from helios.program.rope import rope_frequencies
from helios.reference import operators as ref
from tests.production.helpers import DEVICE, DTYPE, close, cohort, numpy, tensor, values

ROPES = [
    dict(rope_type="default"),
    dict(rope_type="frequency_band", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
         original_max_position_embeddings=64),
    dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64),
]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def _inv_freq(head_dim, rotary_dim, scaling):
    inv_freq, factor = rope_frequencies(theta=10000.0, rotary_dim=rotary_dim, **scaling)
    return torch.from_numpy(inv_freq).to(DEVICE), factor


@pytest.mark.parametrize("scaling", ROPES, ids=lambda s: s["rope_type"])
def test_rotary(rng, scaling):
    head_dim, rotary_dim = 32, 24 if scaling["rope_type"] == "default" else 32
    x = values(rng.standard_normal((9, 3 * head_dim)))
    positions = rng.integers(0, 300, size=9).astype(np.int32)
    inv_freq, factor = _inv_freq(head_dim, rotary_dim, scaling)
    out = torch.empty((9, 3 * head_dim), dtype=DTYPE, device=DEVICE)
    rotary.rotary_cache(tensor(x), tensor(positions), head_dim=head_dim, inv_freq=inv_freq, rotary_dim=rotary_dim,
                        attention_factor=factor, out=out)
    expected = ref.rotary(x, positions, theta=10000.0, head_dim=head_dim, rotary_dim=rotary_dim, **scaling)
    close(out, expected, atol=2e-2 if DTYPE != torch.float32 else 1e-4)


def test_rotary_fused_with_cache_write_and_plain_cache_write(rng):
    c = cohort(rng, lanes=3, history=[5, 0, 17], queries=[1, 6, 2], padding=3, page_tokens=4, max_pages=6)
    kv_heads, head_dim = 2, 16
    k = values(rng.standard_normal((len(c.token_lane), kv_heads * head_dim)))
    start = values(rng.standard_normal((c.pages, 4, kv_heads, head_dim)))
    inv_freq, factor = _inv_freq(head_dim, head_dim, {})
    cache = tensor(start)
    rotary.rotary_cache(tensor(k), tensor(c.positions), head_dim=head_dim, inv_freq=inv_freq, rotary_dim=head_dim,
                        attention_factor=factor, cache=cache, token_lane=tensor(c.token_lane),
                        page_table=tensor(c.page_table))
    rotated = values(ref.rotary(k, c.positions, theta=10000.0, head_dim=head_dim, rotary_dim=head_dim))
    expected = ref.paged_cache_write(start.copy(), rotated, c.token_lane, c.positions, c.page_table)
    close(cache, expected, atol=2e-2 if DTYPE != torch.float32 else 1e-5)
    plain = tensor(start)
    rotary.rotary_cache(tensor(k), tensor(c.positions), head_dim=head_dim, cache=plain,
                        token_lane=tensor(c.token_lane), page_table=tensor(c.page_table))
    close(plain, ref.paged_cache_write(start.copy(), k, c.token_lane, c.positions, c.page_table), atol=0, rtol=0)


@pytest.mark.parametrize("window,softcap,splits,dot", [(None, None, 1, True), (7, None, 1, True),
                                                       (None, 30.0, 1, True), (None, None, 4, True),
                                                       (9, 20.0, 2, True), (None, None, 1, False),
                                                       (7, 20.0, 4, False)])
def test_paged_attention_mixed_cohort(rng, window, softcap, splits, dot):
    page_tokens, max_pages, kv_heads, group, head_dim = 8, 12, 2, 3, 32
    c = cohort(rng, lanes=4, history=[0, 40, 3, 71], queries=[5, 1, 9, 1], padding=2,
               page_tokens=page_tokens, max_pages=max_pages)
    shape = (c.pages, page_tokens, kv_heads, head_dim)
    key_cache, value_cache = values(rng.standard_normal(shape)), values(rng.standard_normal(shape))
    q = values(rng.standard_normal((len(c.token_lane), kv_heads * group * head_dim)))
    out = torch.empty(q.shape, dtype=DTYPE, device=DEVICE)
    scratch = attention.split_scratch(len(c.token_lane), kv_heads * group, head_dim, splits, DEVICE) \
        if splits > 1 else None
    scale = head_dim ** -0.5
    attention.paged_attention(tensor(q), tensor(key_cache), tensor(value_cache), tensor(c.token_lane),
                              tensor(c.positions), tensor(c.page_table), out, scale=scale, sliding_window=window,
                              softcap=softcap, splits=splits, scratch=scratch,
                              tile=attention.AttentionTile(block_n=16, num_warps=4 if dot else 2, dot=dot))
    expected = ref.paged_attention(q, key_cache, value_cache, c.token_lane, c.positions, c.page_table, scale=scale,
                                   sliding_window=window, softcap=softcap)
    close(out, expected, atol=3e-2 if DTYPE != torch.float32 else 2e-5)
    assert not numpy(out)[c.token_lane < 0].any()


def test_choose_splits_covers_long_contexts_only():
    assert attention.choose_splits(rows=1, kv_heads=8, context=32768) > 1
    assert attention.choose_splits(rows=256, kv_heads=8, context=32768) == 1
    assert attention.choose_splits(rows=1, kv_heads=8, context=128) == 1
