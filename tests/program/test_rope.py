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

from helios.ignition.recipes.llama_family import ROPE_TYPES_FROM_HF
from helios.program import OPERATORS, AttributeSpec, ProgramBuilder, rope, validate_program
from helios.program.errors import InvalidAttributeValue
from helios.proto import program_pb2
from helios.reference.interpreter import execute

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
    attributes["rope_type"] = ROPE_TYPES_FROM_HF[parameters["rope_type"]]
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


def _band_program(rope_type: str) -> program_pb2.Program:
    """A program of one frequency-band rotary whose wire attribute reads `rope_type = <rope_type>`."""
    b = ProgramBuilder("g")
    x = b.transport("x", "x", "f32", [4, 16])
    positions = b.transport("positions", "positions", "i32", [4])
    b.rotary(x, positions, theta=500000.0, head_dim=8, rope_type="frequency_band", factor=8.0, low_freq_factor=1.0,
             high_freq_factor=4.0, original_max_position_embeddings=16, into=b.completion("out", "out", "f32", [4, 16]))
    program = b.build()
    (attribute,) = [a for a in program.operators[0].attributes if a.name == "rope_type"]
    attribute.s = rope_type
    return program


def test_a_core_prepared_before_the_frequency_band_rename_still_validates_and_computes_the_same_tables():
    # Cores prepared before the rename carry the checkpoint format's spelling; engine upgrades keep
    # serving them without re-export.
    (old,), (new,) = validate_program(_band_program("llama3")), validate_program(_band_program("frequency_band"))
    assert old == new and old.attributes["rope_type"] == "frequency_band"
    scaling = {k: v for k, v in old.attributes.items() if k != "head_dim"}
    inv_freq, attention_factor = rope.rope_frequencies(**scaling)
    unscaled, _ = rope.rope_frequencies(**{**scaling, "rope_type": "default"})
    assert not np.array_equal(inv_freq, unscaled) and attention_factor == 1.0  # the band scaling applies
    x = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    tensors = {"x": x, "positions": np.array([0, 5, 300, 4000], dtype=np.int32), "out": np.zeros((4, 16), np.float32)}
    np.testing.assert_array_equal(execute(_band_program("llama3"), tensors)["out"],
                                  execute(_band_program("frequency_band"), tensors)["out"])


def test_the_retired_rope_spelling_is_read_as_its_new_name_and_nothing_else_is():
    spec = OPERATORS["rotary"].attribute_map["rope_type"]
    assert dict(spec.renamed) == {"llama3": "frequency_band"}
    assert spec.coerce("llama3", "here") == "frequency_band" and spec.coerce("yarn", "here") == "yarn"
    with pytest.raises(InvalidAttributeValue, match="frequency"):
        spec.coerce("llama", "here")
    with pytest.raises(ValueError, match="retired"):
        AttributeSpec("kind", "s", choices=("a",), renamed=(("old", "b"),))
