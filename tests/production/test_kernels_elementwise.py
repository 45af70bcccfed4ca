"""Norm, activation and gather kernels against their reference operators, on fresh random inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.production.kernels import activation, gather, norm
from helios.reference import operators as ref
from tests.production.helpers import DEVICE, DTYPE, close, tensor, values


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
