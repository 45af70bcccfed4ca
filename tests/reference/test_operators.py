"""Each reference operator against an independent computation on fresh random inputs.

Norms, rotary embedding (all four scalings) and the gated activation are compared with Hugging Face
transformers' own functions; the paged operators with dense attention over the same tokens.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as torch_functional
from transformers import LlamaConfig
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from helios.ignition.recipes.llama_family import ROPE_TYPES_FROM_HF
from helios.program.rope import rope_frequencies
from helios.reference import operators as ops

RNG = np.random.default_rng(20261129)


def randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


def test_embedding_gathers_rows_and_zeroes_out_of_range_ids():
    table = randn(11, 6)
    ids = np.array([3, 0, 10, -1, 11, 3], dtype=np.int32)
    out = ops.embedding(ids, table)
    expected = torch_functional.embedding(t(np.clip(ids, 0, 10).astype(np.int64)), t(table)).numpy()
    expected[[3, 4]] = 0
    np.testing.assert_array_equal(out, expected)


def test_rms_norm_matches_hf():
    x, weight = randn(5, 3, 16), randn(16)
    norm = LlamaRMSNorm(16, eps=1e-6)
    norm.weight.data = t(weight)
    np.testing.assert_allclose(ops.rms_norm(x, weight, eps=1e-6), norm(t(x)).detach().numpy(), rtol=1e-5, atol=1e-6)


def test_rms_norm_weight_offset_adds_to_the_weight():
    x, weight = randn(4, 8), randn(8)
    np.testing.assert_allclose(
        ops.rms_norm(x, weight, eps=1e-5, weight_offset=1.0), ops.rms_norm(x, weight + 1, eps=1e-5), rtol=1e-6
    )


def test_layer_norm_matches_torch_with_and_without_bias():
    x, weight, bias = randn(7, 12), randn(12), randn(12)
    expected = torch_functional.layer_norm(t(x), (12,), t(weight), t(bias), eps=1e-5).numpy()
    np.testing.assert_allclose(ops.layer_norm(x, weight, bias, eps=1e-5), expected, rtol=1e-5, atol=1e-5)
    expected = torch_functional.layer_norm(t(x), (12,), t(weight), None, eps=1e-5).numpy()
    np.testing.assert_allclose(ops.layer_norm(x, weight, eps=1e-5), expected, rtol=1e-5, atol=1e-5)


def test_head_rms_norm_normalizes_each_head_like_hf_qk_norm():
    heads, head_dim = 4, 8
    x, weight = randn(6, heads * head_dim), randn(head_dim)
    norm = LlamaRMSNorm(head_dim, eps=1e-6)  # the qk-norm module is this RMSNorm over head_dim
    norm.weight.data = t(weight)
    expected = norm(t(x).view(6, heads, head_dim)).detach().numpy().reshape(6, -1)
    np.testing.assert_allclose(ops.head_rms_norm(x, weight, eps=1e-6, head_dim=head_dim), expected, rtol=1e-5, atol=1e-6)


def test_matmul_uses_out_in_weights_like_linear():
    x, weight, bias = randn(3, 2, 10), randn(7, 10), randn(7)
    np.testing.assert_allclose(
        ops.matmul(x, weight, bias), torch_functional.linear(t(x), t(weight), t(bias)).numpy(), rtol=1e-5, atol=1e-5
    )
    np.testing.assert_allclose(ops.matmul(x, weight), (x.astype(np.float64) @ weight.T.astype(np.float64)), rtol=1e-4,
                               atol=1e-5)


def test_add_and_mul_are_elementwise():
    a, b = randn(4, 5), randn(4, 5)
    np.testing.assert_array_equal(ops.add(a, b), a + b)
    np.testing.assert_array_equal(ops.mul(a, b), a * b)


@pytest.mark.parametrize("activation, hf_name", [("silu", "silu"), ("gelu", "gelu"), ("gelu_tanh", "gelu_pytorch_tanh")])
def test_gated_activation_matches_hf_activations(activation, hf_name):
    gate, up = randn(6, 20) * 3, randn(6, 20)
    expected = (ACT2FN[hf_name](t(gate)) * t(up)).numpy()
    np.testing.assert_allclose(ops.gated_activation(gate, up, activation=activation), expected, rtol=1e-5, atol=1e-6)


ROPE_CASES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64},
    "yarn-mscale": {"rope_type": "yarn", "rope_theta": 20000.0, "factor": 8.0, "original_max_position_embeddings": 128,
                    "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.707, "mscale_all_dim": 1.0},
    "yarn-explicit": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.0, "original_max_position_embeddings": 32,
                      "attention_factor": 1.25, "truncate": False},
}


def _our_rope_attributes(parameters: dict) -> dict:
    attributes = {k: v for k, v in parameters.items() if k != "rope_theta"}
    attributes["theta"] = parameters["rope_theta"]
    attributes["rope_type"] = ROPE_TYPES_FROM_HF[parameters["rope_type"]]
    return attributes


@pytest.mark.parametrize("case", sorted(ROPE_CASES))
def test_rope_frequencies_match_hf_rope_init(case):
    parameters = ROPE_CASES[case]
    head_dim = 32
    config = LlamaConfig(hidden_size=128, num_attention_heads=4, head_dim=head_dim, max_position_embeddings=512,
                         rope_parameters=dict(parameters))
    hf = LlamaRotaryEmbedding(config)
    inv_freq, attention_factor = rope_frequencies(rotary_dim=head_dim, **_our_rope_attributes(parameters))
    np.testing.assert_allclose(inv_freq, hf.inv_freq.numpy(), rtol=2e-7)
    assert math.isclose(attention_factor, hf.attention_scaling, rel_tol=1e-12)


@pytest.mark.parametrize("case", sorted(ROPE_CASES))
def test_rotary_matches_hf_apply_rotary_pos_emb(case):
    parameters = ROPE_CASES[case]
    heads, head_dim, rows = 3, 32, 9
    config = LlamaConfig(hidden_size=96, num_attention_heads=heads, head_dim=head_dim, max_position_embeddings=512,
                         rope_parameters=dict(parameters))
    hf = LlamaRotaryEmbedding(config)
    x = randn(rows, heads * head_dim)
    positions = RNG.integers(0, 400, size=rows).astype(np.int32)
    cos, sin = hf(t(x), t(positions.astype(np.int64))[None, :])
    q = t(x).view(1, rows, heads, head_dim).transpose(1, 2)
    expected, _ = apply_rotary_pos_emb(q, q, cos, sin)
    expected = expected.transpose(1, 2).reshape(rows, heads * head_dim).numpy()
    out = ops.rotary(x, positions, head_dim=head_dim, rotary_dim=head_dim, **_our_rope_attributes(parameters))
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=2e-5)


def test_partial_rotary_rotates_the_leading_features_and_passes_the_rest():
    heads, head_dim, rotary_dim = 2, 16, 8
    x = randn(5, heads * head_dim)
    positions = np.arange(5, dtype=np.int32) * 7
    out = ops.rotary(x, positions, theta=10000.0, head_dim=head_dim, rotary_dim=rotary_dim).reshape(5, heads, head_dim)
    full = ops.rotary(x.reshape(5, heads, head_dim)[..., :rotary_dim].reshape(5, -1), positions, theta=10000.0,
                      head_dim=rotary_dim, rotary_dim=rotary_dim).reshape(5, heads, rotary_dim)
    np.testing.assert_array_equal(out[..., rotary_dim:], x.reshape(5, heads, head_dim)[..., rotary_dim:])
    np.testing.assert_array_equal(out[..., :rotary_dim], full)


# Paged cache and attention -------------------------------------------------------------------------


def _scatter_pages(lanes_kv, page_tokens, max_pages, pages, kv_heads, head_dim):
    """A random page assignment per lane; returns page_table and empty planes."""
    order = RNG.permutation(pages)
    page_table = np.full((len(lanes_kv), max_pages), -1, dtype=np.int32)
    cursor = 0
    for lane, length in enumerate(lanes_kv):
        needed = -(-length // page_tokens)
        page_table[lane, :needed] = order[cursor:cursor + needed]
        cursor += needed
    empty = np.zeros((pages, page_tokens, kv_heads, head_dim), dtype=np.float32)
    return page_table, empty, empty.copy()


def _dense_attention(q, k, v, positions, scale, window=None, softcap=None):
    """float64 causal GQA attention of one lane: q [n, H, D] at `positions` over k, v [L, KV, D]."""
    heads, kv_heads = q.shape[1], k.shape[1]
    k = np.repeat(k.astype(np.float64), heads // kv_heads, axis=1)
    v = np.repeat(v.astype(np.float64), heads // kv_heads, axis=1)
    scores = np.einsum("nhd,lhd->hnl", q.astype(np.float64), k) * scale
    if softcap is not None:
        scores = softcap * np.tanh(scores / softcap)
    key_positions = np.arange(k.shape[0])
    allowed = key_positions[None, :] <= positions[:, None]
    if window is not None:
        allowed &= key_positions[None, :] > positions[:, None] - window
    scores = np.where(allowed[None], scores, -np.inf)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return np.einsum("hnl,lhd->nhd", weights, v)


@pytest.mark.parametrize("window, softcap", [(None, None), (5, None), (None, 3.0), (4, 2.5)])
def test_paged_attention_matches_dense_causal_attention(window, softcap):
    heads, kv_heads, head_dim, page_tokens = 6, 2, 8, 4
    # Ragged lanes: (tokens already cached, new tokens this round); histories cross page boundaries.
    lanes = [(0, 7), (9, 1), (3, 6), (13, 1)]
    totals = [done + new for done, new in lanes]
    page_table, key_cache, value_cache = _scatter_pages(totals, page_tokens, 6, 24, kv_heads, head_dim)
    keys = [randn(n, kv_heads, head_dim) for n in totals]
    values = [randn(n, kv_heads, head_dim) for n in totals]
    queries = [randn(new, heads, head_dim) for _, new in lanes]
    # History first, one prefill-style write; then this round's packed rows, interleaved, with padding.
    for lane, (done, _) in enumerate(lanes):
        if done:
            rows = np.arange(done, dtype=np.int32)
            for cache, source in ((key_cache, keys), (value_cache, values)):
                ops.paged_cache_write(cache, source[lane][:done].reshape(done, -1), np.full(done, lane, np.int32),
                                      rows, page_table)
    packed = [(lane, done + i) for lane, (done, new) in enumerate(lanes) for i in range(new)]
    RNG.shuffle(packed)
    packed += [(-1, 0)] * 3
    token_lane = np.array([lane for lane, _ in packed], dtype=np.int32)
    positions = np.array([pos for _, pos in packed], dtype=np.int32)
    q = np.zeros((len(packed), heads * head_dim), dtype=np.float32)
    new_keys = np.zeros((len(packed), kv_heads * head_dim), dtype=np.float32)
    new_values = np.zeros_like(new_keys)
    for row, (lane, pos) in enumerate(packed):
        if lane >= 0:
            q[row] = queries[lane][pos - lanes[lane][0]].reshape(-1)
            new_keys[row] = keys[lane][pos].reshape(-1)
            new_values[row] = values[lane][pos].reshape(-1)
    ops.paged_cache_write(key_cache, new_keys, token_lane, positions, page_table)
    ops.paged_cache_write(value_cache, new_values, token_lane, positions, page_table)
    scale = head_dim ** -0.5
    out = ops.paged_attention(q, key_cache, value_cache, token_lane, positions, page_table, scale=scale,
                              sliding_window=window, softcap=softcap).reshape(len(packed), heads, head_dim)
    for lane, (done, _new) in enumerate(lanes):
        rows = np.flatnonzero(token_lane == lane)
        lane_positions = positions[rows]
        expected = _dense_attention(queries[lane][lane_positions - done], keys[lane], values[lane], lane_positions,
                                    scale, window, softcap)
        np.testing.assert_allclose(out[rows], expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(out[token_lane < 0], 0)


def test_paged_attention_matches_torch_sdpa_for_one_prefill_lane():
    heads, kv_heads, head_dim, page_tokens, n = 4, 2, 16, 8, 19
    page_table = np.array([[2, 0, 3]], dtype=np.int32)
    caches = [np.zeros((4, page_tokens, kv_heads, head_dim), np.float32) for _ in range(2)]
    q, k, v = randn(n, heads * head_dim), randn(n, kv_heads * head_dim), randn(n, kv_heads * head_dim)
    lane, positions = np.zeros(n, np.int32), np.arange(n, dtype=np.int32)
    ops.paged_cache_write(caches[0], k, lane, positions, page_table)
    ops.paged_cache_write(caches[1], v, lane, positions, page_table)
    out = ops.paged_attention(q, caches[0], caches[1], lane, positions, page_table, scale=0.3)
    qt = t(q).view(n, heads, head_dim).transpose(0, 1)[None]
    kt = t(k).view(n, kv_heads, head_dim).transpose(0, 1)[None].repeat_interleave(heads // kv_heads, dim=1)
    vt = t(v).view(n, kv_heads, head_dim).transpose(0, 1)[None].repeat_interleave(heads // kv_heads, dim=1)
    expected = torch_functional.scaled_dot_product_attention(qt, kt, vt, is_causal=True, scale=0.3)
    np.testing.assert_allclose(out, expected[0].transpose(0, 1).reshape(n, -1).numpy(), rtol=1e-4, atol=1e-5)


def test_paged_cache_write_places_tokens_and_skips_padding():
    cache = np.zeros((5, 2, 1, 3), dtype=np.float32)
    values = randn(4, 3)
    page_table = np.array([[4, 1, 0], [2, 3, 0]], dtype=np.int32)
    out = ops.paged_cache_write(cache, values, np.array([0, 1, -1, 0], np.int32), np.array([3, 0, 1, 0], np.int32),
                                page_table)
    assert out is cache
    np.testing.assert_array_equal(cache[1, 1, 0], values[0])  # lane 0 position 3: page 1, slot 1
    np.testing.assert_array_equal(cache[2, 0, 0], values[1])  # lane 1 position 0
    np.testing.assert_array_equal(cache[4, 0, 0], values[3])  # lane 0 position 0
    assert np.count_nonzero(cache.any(axis=(2, 3))) == 3


def test_last_row_gather_takes_each_lanes_last_packed_row():
    x = randn(6, 4)
    token_lane = np.array([1, 0, 1, 0, -1, 1], dtype=np.int32)
    out = ops.last_row_gather(x, token_lane, lanes=3)
    np.testing.assert_array_equal(out, np.stack([x[3], x[5], np.zeros(4, np.float32)]))
    positions = np.array([4, 0, 5, 1, 0, 6], dtype=np.int32)
    np.testing.assert_array_equal(ops.last_row_gather(positions, token_lane, lanes=2), [1, 6])


def test_logits_are_f32_with_padding_columns_at_minus_infinity_and_softcap():
    h, weight = randn(3, 8), randn(10, 8)
    out = ops.logits(h, weight, sampled_tokens=7)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out[:, :7], (h.astype(np.float64) @ weight.T)[:, :7], rtol=1e-4, atol=1e-5)
    assert np.all(out[:, 7:] == -np.inf)
    capped = ops.logits(h, weight, softcap=2.0)
    np.testing.assert_allclose(capped, 2.0 * np.tanh((h.astype(np.float64) @ weight.T) / 2.0), rtol=1e-4, atol=1e-5)


def test_argmax_prefers_the_lowest_id_on_ties_and_ignores_nan():
    logits = np.array([[1, 3, 3, 0], [np.nan, 2, 5, 5]], dtype=np.float32)
    np.testing.assert_array_equal(ops.argmax(logits), [1, 2])


def test_copy_and_fill():
    x = randn(2, 3)
    copied = ops.copy(x)
    assert copied is not x
    np.testing.assert_array_equal(copied, x)
    filled = ops.fill(value=-1.0, shape=(4,), dtype="i32")
    assert filled.dtype == np.int32
    np.testing.assert_array_equal(filled, [-1, -1, -1, -1])


def test_rows_addressing_pages_outside_the_table_or_the_plane_are_rejected():
    cache = np.zeros((3, 2, 1, 2), dtype=np.float32)
    values = randn(1, 2)
    lane = np.zeros(1, np.int32)
    with pytest.raises(ops.InvalidCacheSlot, match="lane 0"):
        ops.paged_cache_write(cache, values, lane, np.array([4], np.int32), np.array([[0, 1]], np.int32))
    with pytest.raises(ops.InvalidCacheSlot, match="outside"):
        ops.paged_cache_write(cache, values, lane, np.array([0], np.int32), np.array([[-1, 1]], np.int32))
    with pytest.raises(ops.InvalidCacheSlot, match="outside"):
        ops.paged_attention(randn(1, 2), cache, cache, lane, np.array([2], np.int32), np.array([[0, 3]], np.int32),
                            scale=1.0)
