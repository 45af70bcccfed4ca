"""Norm, activation and gather kernels against their reference operators, on fresh random inputs; the
rotary kernel with a head norm in its prologue and the k and v cache writes in one launch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import activation, gather, norm, rotary
from helios.program.rope import rope_frequencies
from helios.reference import operators as ref
from tests.production.helpers import DEVICE, DTYPE, GPU, close, cohort, numpy, tensor, values


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def test_rms_norm_with_and_without_residual(rng):
    x, r = values(rng.standard_normal((7, 96))), values(rng.standard_normal((7, 96)))
    w = values(rng.standard_normal(96))
    out = torch.empty((7, 96), dtype=DTYPE, device=DEVICE)
    norm.norm(tensor(x), tensor(w), out, eps=1e-6, weight_offset=1.0)
    close(out, ref.rms_norm(x, w, eps=1e-6, weight_offset=1.0))
    summed = torch.empty_like(out)
    norm.norm(tensor(x), tensor(w), out, eps=1e-5, residual=tensor(r), sum_out=summed)
    total = values(ref.add(x, r))
    close(summed, total)
    close(out, ref.rms_norm(total, w, eps=1e-5))


def test_head_rms_norm_and_layer_norm(rng):
    x, w = values(rng.standard_normal((5, 4 * 32))), values(rng.standard_normal(32))
    out = torch.empty((5, 128), dtype=DTYPE, device=DEVICE)
    norm.norm(tensor(x), tensor(w), out, eps=1e-6, width=32)
    close(out, ref.head_rms_norm(x, w, eps=1e-6, head_dim=32))
    w2, b2 = values(rng.standard_normal(128)), values(rng.standard_normal(128))
    norm.norm(tensor(x), tensor(w2), out, eps=1e-5, layer=True, bias=tensor(b2))
    close(out, ref.layer_norm(x, w2, b2, eps=1e-5))


@pytest.mark.parametrize("kind", ["silu", "gelu", "gelu_tanh"])
def test_gated_activation(rng, kind):
    gate, up = values(4 * rng.standard_normal((6, 200))), values(rng.standard_normal((6, 200)))
    out = torch.empty((6, 200), dtype=DTYPE, device=DEVICE)
    activation.gated_activation(tensor(gate), tensor(up), out, activation=kind, block=2048)
    close(out, ref.gated_activation(gate, up, activation=kind))


def test_embedding_and_last_row_gather(rng):
    table = values(rng.standard_normal((50, 64)))
    ids = rng.integers(-3, 53, size=12).astype(np.int32)
    out = torch.empty((12, 64), dtype=DTYPE, device=DEVICE)
    gather.embedding(tensor(ids), tensor(table), out)
    close(out, ref.embedding(ids, table), atol=0, rtol=0)
    lanes = np.array([2, 2, 0, 1, 1, 1, -1, -1, 2, -1, -1, -1], np.int32)
    x = values(rng.standard_normal((12, 64)))
    gathered = torch.empty((5, 64), dtype=DTYPE, device=DEVICE)
    gather.last_row_gather(tensor(x), tensor(lanes), gathered)
    close(gathered, ref.last_row_gather(x, lanes, lanes=5), atol=0, rtol=0)
    positions = np.arange(12, dtype=np.int32) * 3
    gathered_positions = torch.empty((5,), dtype=torch.int32, device=DEVICE)
    gather.last_row_gather(tensor(positions), tensor(lanes), gathered_positions)
    np.testing.assert_array_equal(gathered_positions.cpu().numpy(), ref.last_row_gather(positions, lanes, lanes=5))


@pytest.mark.parametrize(("shape", "dtype"), [((9,), np.int64), ((9, 7), np.float32), ((9, 3, 40), np.int32)])
def test_a_gather_with_indices_outside_the_rows(rng, shape, dtype):
    x = (rng.standard_normal(shape) * 1000).astype(dtype)
    index = np.array([3, -1, 8, 0, 9, 3, 12], np.int32)  # a repeat, a padding row, two past the end
    source = torch.from_numpy(x).to(DEVICE)  # its own dtype on every device
    out = torch.full((len(index), *shape[1:]), 7, dtype=source.dtype, device=DEVICE)
    gather.gather_group([source], tensor(index), [out], block=16)
    np.testing.assert_array_equal(numpy(out), ref.gather(x, index))


def test_gather_group_picks_every_tensor_by_one_index(rng):
    xs = [rng.standard_normal((6, 5)).astype(np.float32), rng.integers(0, 2**40, size=6).astype(np.int64),
          rng.integers(-9, 9, size=(6, 3, 70)).astype(np.int32)]
    index = np.array([5, 0, -1, 6, 2], np.int32)
    sources = [torch.from_numpy(x).to(DEVICE) for x in xs]
    outs = [torch.full((len(index), *x.shape[1:]), 3, dtype=t.dtype, device=DEVICE) for x, t in zip(xs, sources, strict=True)]
    gather.gather_group(sources, tensor(index), outs, block=32)
    for x, out in zip(xs, outs, strict=True):
        np.testing.assert_array_equal(numpy(out), ref.gather(x, index))
    with pytest.raises(ValueError, match="1..6 tensors"):
        gather.gather_group(sources * 3, tensor(index), outs * 3)


def _same(fused: torch.Tensor, unfused: torch.Tensor) -> None:
    """Fused and unfused launches round alike: bit for bit in the interpreter; on a GPU (bf16) their
    FP32 sums of squares may add in another order, moving a rounding by one step."""
    tolerance = 2e-2 if GPU else 0.0
    np.testing.assert_allclose(numpy(fused), numpy(unfused), rtol=tolerance, atol=tolerance)


def _plane(start: np.ndarray) -> torch.Tensor:
    """A cache plane of its own (`tensor` may share the array's memory on a CPU)."""
    return tensor(start).clone()


@pytest.mark.parametrize("rotary_dim,weight_offset", [(32, 0.0), (16, 1.0)])
def test_head_norm_in_the_rotary_prologue_with_both_cache_writes(rng, rotary_dim, weight_offset):
    """head_rms_norm -> rotary (q) and head_rms_norm -> rotary -> paged_cache_write plus the v write
    (k, v), each one launch and both as one, against the reference operators and the unfused launches."""
    head_dim, heads, kv_heads, eps = 32, 4, 2, 1e-6
    c = cohort(rng, lanes=3, history=[5, 0, 11], queries=[1, 5, 2], padding=2, page_tokens=4, max_pages=5)
    rows = len(c.token_lane)
    q = values(rng.standard_normal((rows, heads * head_dim)))
    k, v = (values(rng.standard_normal((rows, kv_heads * head_dim))) for _ in range(2))
    q_w, k_w = (values(rng.standard_normal(head_dim)) for _ in range(2))
    key_start, value_start = (values(rng.standard_normal((c.pages, 4, kv_heads, head_dim))) for _ in range(2))
    inv_freq, factor = rope_frequencies(theta=10000.0, rotary_dim=rotary_dim)
    rope = dict(head_dim=head_dim, inv_freq=torch.from_numpy(inv_freq).to(DEVICE), rotary_dim=rotary_dim,
                attention_factor=factor)
    lanes, positions, table = tensor(c.token_lane), tensor(c.positions), tensor(c.page_table)

    def expected_rotated(x, w):
        # the unfused norm stores its output in the activation dtype; rotary reads that back
        normed = values(ref.head_rms_norm(x, w + np.float32(weight_offset), eps=eps, head_dim=head_dim))
        return ref.rotary(normed, c.positions, theta=10000.0, head_dim=head_dim, rotary_dim=rotary_dim)

    q_out = torch.empty((rows, heads * head_dim), dtype=DTYPE, device=DEVICE)
    q_norm, k_norm = (rotary.HeadNorm(tensor(w), eps, weight_offset) for w in (q_w, k_w))
    rotary.rotary_cache(tensor(q), positions, norm=q_norm, out=q_out, **rope)
    tolerance = {} if DTYPE == torch.float32 else {"atol": 5e-2, "rtol": 5e-2}
    close(q_out, expected_rotated(q, q_w), **({"atol": 1e-5, "rtol": 1e-5} | tolerance))
    key_cache, value_cache = _plane(key_start), _plane(value_start)
    rotary.rotary_cache(tensor(k), positions, norm=k_norm, cache=key_cache, token_lane=lanes, page_table=table,
                        values=tensor(v), value_cache=value_cache, **rope)
    rotated_k = values(expected_rotated(k, k_w))
    close(key_cache, ref.paged_cache_write(key_start.copy(), rotated_k, c.token_lane, c.positions, c.page_table),
          **({"atol": 1e-5, "rtol": 1e-5} | tolerance))
    close(value_cache, ref.paged_cache_write(value_start.copy(), v, c.token_lane, c.positions, c.page_table),
          atol=0, rtol=0)

    # the unfused launches: norm kernel, rotary kernel, one cache write each
    normed = torch.empty_like(q_out)
    norm.norm(tensor(q), tensor(q_w), normed, eps=eps, weight_offset=weight_offset, width=head_dim)
    unfused_q = torch.empty_like(q_out)
    rotary.rotary_cache(normed, positions, out=unfused_q, **rope)
    _same(q_out, unfused_q)
    normed_k, rotated = (torch.empty((rows, kv_heads * head_dim), dtype=DTYPE, device=DEVICE) for _ in range(2))
    norm.norm(tensor(k), tensor(k_w), normed_k, eps=eps, weight_offset=weight_offset, width=head_dim)
    unfused_key, unfused_value = _plane(key_start), _plane(value_start)
    rotary.rotary_cache(normed_k, positions, out=rotated, **rope)
    rotary.rotary_cache(rotated, positions, head_dim=head_dim, cache=unfused_key, token_lane=lanes, page_table=table)
    rotary.rotary_cache(tensor(v), positions, head_dim=head_dim, cache=unfused_value, token_lane=lanes,
                        page_table=table)
    _same(key_cache, unfused_key)
    _same(value_cache, unfused_value)

    # q and k (with both cache writes) as one launch of two sides: what the two launches above store
    pair_q, pair_key, pair_value = torch.empty_like(q_out), _plane(key_start), _plane(value_start)
    rotary.rotary_pair(tensor(q), pair_q, tensor(k), positions, q_norm=q_norm, k_norm=k_norm, cache=pair_key,
                       token_lane=lanes, page_table=table, values=tensor(v), value_cache=pair_value, **rope)
    for fused, single in ((pair_q, q_out), (pair_key, key_cache), (pair_value, value_cache)):
        _same(fused, single)


def test_rotary_pair_without_norms_keeps_the_rotated_keys(rng):
    """Llama's prologue: q and k rotate, k also into the cache (and into k_out, read again), v beside it."""
    head_dim = 16
    c = cohort(rng, lanes=2, history=[3, 9], queries=[2, 1], padding=1, page_tokens=4, max_pages=4)
    rows = len(c.token_lane)
    q, k, v = (values(rng.standard_normal((rows, heads * head_dim))) for heads in (6, 2, 2))
    start = values(rng.standard_normal((c.pages, 4, 2, head_dim)))
    inv_freq, factor = rope_frequencies(theta=10000.0, rotary_dim=head_dim)
    q_out, k_out = torch.empty((rows, 6 * head_dim), dtype=DTYPE, device=DEVICE), torch.empty_like(tensor(k))
    key_cache, value_cache = _plane(start), _plane(start)
    rotary.rotary_pair(tensor(q), q_out, tensor(k), tensor(c.positions), head_dim=head_dim,
                       inv_freq=torch.from_numpy(inv_freq).to(DEVICE), rotary_dim=head_dim, attention_factor=factor,
                       k_out=k_out, cache=key_cache, token_lane=tensor(c.token_lane), page_table=tensor(c.page_table),
                       values=tensor(v), value_cache=value_cache)
    tolerance = {"atol": 1e-5, "rtol": 1e-5} if DTYPE == torch.float32 else {"atol": 5e-2, "rtol": 5e-2}
    rope = dict(theta=10000.0, head_dim=head_dim, rotary_dim=head_dim)
    close(q_out, ref.rotary(q, c.positions, **rope), **tolerance)
    rotated_k = ref.rotary(k, c.positions, **rope)
    close(k_out, rotated_k, **tolerance)
    close(key_cache, ref.paged_cache_write(start.copy(), values(rotated_k), c.token_lane, c.positions, c.page_table),
          **tolerance)
    close(value_cache, ref.paged_cache_write(start.copy(), v, c.token_lane, c.positions, c.page_table), atol=0, rtol=0)


def test_values_need_a_cache_plane_of_the_keys_shape(rng):
    x = tensor(values(rng.standard_normal((2, 32))))
    cache = torch.zeros((3, 4, 1, 32), dtype=DTYPE, device=DEVICE)
    lanes, positions, table = (tensor(np.zeros(n, np.int32)) for n in (2, 2, (1, 3)))
    with pytest.raises(ValueError, match="value_cache shaped like cache"):
        rotary.rotary_cache(x, positions, head_dim=32, cache=cache, token_lane=lanes, page_table=table, values=x,
                            value_cache=torch.zeros((3, 4, 2, 16), dtype=DTYPE, device=DEVICE))
