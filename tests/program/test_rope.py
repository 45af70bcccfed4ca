"""The rotary inverse frequencies follow transformers' ROPE_INIT_FUNCTIONS bit for bit.

docs/operators.md promises "exactly as transformers computes them, in FP32". torch evaluates
`scalar / tensor` as `reciprocal(tensor) * scalar`, which differs from a division by one ulp for about
a quarter of the values, so the comparison here is exact, over head sizes and contexts that are not
powers of two. The one step not reproduced bit for bit is torch's FP32 power `theta ** (2i / d)`:
the reference rounds the exact power correctly, torch's vectorized powf is off by one ulp in rare
entries. Given torch's powers, everything after them is exact; the powers themselves are within one
ulp.
"""

from __future__ import annotations

import numpy as np
import pytest

from helios.program import rope

CASES = [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "default", "rope_theta": 1000000.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 3.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 100},
    {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 4.0, "low_freq_factor": 2.0, "high_freq_factor": 6.0,
     "original_max_position_embeddings": 3000},
    {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0, "original_max_position_embeddings": 32768},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 2.5, "original_max_position_embeddings": 1000,
     "beta_fast": 16.0, "beta_slow": 2.0, "mscale": 0.707, "mscale_all_dim": 1.0},
]


@pytest.mark.parametrize("head_dim", [64, 96, 128])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_inverse_frequencies_are_bit_exact_given_the_base_powers(case, head_dim, monkeypatch):
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    parameters = CASES[case]
    config = LlamaConfig(hidden_size=4 * head_dim, num_attention_heads=4, head_dim=head_dim,
                         max_position_embeddings=131072, rope_parameters=dict(parameters))
    hf = LlamaRotaryEmbedding(config)
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    torch_powers = (parameters["rope_theta"] ** exponents).numpy()
    monkeypatch.setattr(rope, "_base_powers", lambda theta, d: torch_powers.copy())
    attributes = {k: v for k, v in parameters.items() if k != "rope_theta"}
    inv_freq, attention_factor = rope.rope_frequencies(theta=parameters["rope_theta"], rotary_dim=head_dim,
                                                      **attributes)
    np.testing.assert_array_equal(inv_freq, hf.inv_freq.numpy())
    assert attention_factor == hf.attention_scaling


@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])
@pytest.mark.parametrize("theta", [10000.0, 20000.0, 500000.0, 1000000.0])
def test_base_powers_are_correctly_rounded_and_within_one_ulp_of_torch(theta, head_dim):
    import torch

    ours = rope._base_powers(theta, head_dim)
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    theirs = (theta ** exponents).numpy()
    ulps = np.abs(ours.view(np.int32).astype(np.int64) - theirs.view(np.int32).astype(np.int64))
    assert ulps.max() <= 1 and (ulps > 0).sum() <= 2
    exact = theta ** exponents.double().numpy()  # the true power of the FP32 exponents
    assert np.all(np.abs(ours.astype(np.float64) - exact) <= np.spacing(ours).astype(np.float64) / 2)
