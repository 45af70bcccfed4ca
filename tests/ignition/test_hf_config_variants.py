"""Real-world config.json variants read exactly as transformers reads them.

Each case edits a tiny checkpoint's config.json, then compares what the Llama-family recipe reads
(`parse_config`, or the rotary attributes of a prepared program) with what transformers builds from
the same file: per-layer sliding windows, head_dim, kv heads, biases, the context default and the
rope frequencies. Absent keys take transformers' per-model defaults.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.ignition.reader import UnsupportedCheckpoint, read_checkpoint
from helios.ignition.recipes.llama_family import parse_config
from helios.program.rope import rope_frequencies
from helios.proto import program_pb2

SMALL = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1,), prefill_capacities=(8,))


def _edited(tiny_checkpoint, family, tmp_path, **changes):
    directory = tmp_path / family
    shutil.copytree(tiny_checkpoint(family), directory)
    config = json.loads((directory / "config.json").read_text())
    for key, value in changes.items():
        if value is _ABSENT:
            config.pop(key, None)
        else:
            config[key] = value
    (directory / "config.json").write_text(json.dumps(config))
    return directory


_ABSENT = object()


def _hf_reading(directory) -> dict:
    """What transformers' modeling code builds from directory/config.json (random weights)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(directory)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    attention = [layer.self_attn for layer in model.model.layers]
    if config.model_type == "mistral":  # MistralAttention reads config.sliding_window on every layer
        windows = tuple(config.sliding_window for _ in attention)
    else:
        windows = tuple(getattr(a, "sliding_window", None) for a in attention)
    first = attention[0]
    return {
        "windows": windows,
        "head_dim": first.head_dim,
        "kv_heads": first.k_proj.out_features // first.head_dim,
        "qkv_bias": first.q_proj.bias is not None,
        "o_bias": first.o_proj.bias is not None,
        "mlp_bias": model.model.layers[0].mlp.gate_proj.bias is not None,
        "max_position_embeddings": config.max_position_embeddings,
    }


def _ours(directory) -> dict:
    cfg = parse_config(read_checkpoint(directory))
    return {"windows": cfg.windows, "head_dim": cfg.head_dim, "kv_heads": cfg.kv_heads, "qkv_bias": cfg.qkv_bias,
            "o_bias": cfg.o_bias, "mlp_bias": cfg.mlp_bias, "max_position_embeddings": cfg.max_position_embeddings}


@pytest.mark.parametrize(("family", "changes"), [
    ("qwen3", {"head_dim": _ABSENT}),  # Qwen3Config: head_dim 128 whatever hidden / heads
    ("qwen2", {"num_key_value_heads": _ABSENT, "num_attention_heads": 32}),  # Qwen2Config: 32 kv heads
    ("mistral", {"num_key_value_heads": _ABSENT, "num_attention_heads": 8}),  # MistralConfig: 8 kv heads
    ("llama", {"num_key_value_heads": None}),  # null: one kv head per query head
    ("mistral", {"sliding_window": _ABSENT}),  # MistralConfig: a 4096-token window
    ("mistral", {"sliding_window": None}),
    ("qwen2", {"use_sliding_window": True, "sliding_window": 8, "num_hidden_layers": 30,
               "max_window_layers": _ABSENT, "layer_types": _ABSENT}),  # sliding from layer 28 on
    ("qwen2", {"use_sliding_window": False, "sliding_window": 8}),  # a window that is not used
    ("qwen3", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1, "layer_types": _ABSENT}),
    ("qwen3", {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}),  # saved layer types win
    ("qwen3", {"use_sliding_window": True, "sliding_window": 6,
               "layer_types": ["full_attention", "sliding_attention", "full_attention"]}),
    ("llama", {"sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"]}),  # Llama ignores both
    ("mistral", {"attention_bias": True}),  # Mistral has no attention biases
    ("qwen2", {"attention_bias": True, "mlp_bias": True}),  # Qwen2: q/k/v biased, o and MLP never
    ("qwen3", {"attention_bias": True, "mlp_bias": True}),  # Qwen3: q/k/v/o biased, MLP never
    ("llama", {"attention_bias": True, "mlp_bias": True}),
    ("qwen2", {"max_position_embeddings": _ABSENT}),
    ("llama", {"max_position_embeddings": _ABSENT}),
])
def test_config_variants_read_as_transformers_reads_them(tiny_checkpoint, tmp_path, family, changes):
    directory = _edited(tiny_checkpoint, family, tmp_path, **changes)
    assert _ours(directory) == _hf_reading(directory)


@pytest.mark.parametrize(("family", "changes"), [
    # transformers nulls the window (use_sliding_window is false), then cannot build the sliding mask.
    ("qwen2", {"use_sliding_window": False, "sliding_window": 8,
               "layer_types": ["sliding_attention", "full_attention"]}),
    ("qwen3", {"sliding_window": 6, "layer_types": ["full_attention", "sliding_attention", "full_attention"]}),
])
def test_sliding_layers_without_an_effective_window_are_refused_like_transformers(
        tiny_checkpoint, tmp_path, family, changes):
    import torch
    from transformers import AutoModelForCausalLM

    directory = _edited(tiny_checkpoint, family, tmp_path, **changes)
    with pytest.raises(UnsupportedCheckpoint, match="sliding_window") as error:
        parse_config(read_checkpoint(directory))
    assert "\n" not in str(error.value)
    model = AutoModelForCausalLM.from_pretrained(directory)
    with pytest.raises(ValueError, match="sliding_window"):
        model(torch.tensor([[1, 2, 3]]), use_cache=False)


def _rotary_attributes(prepared) -> dict:
    program = program_pb2.Program.FromString(prepared.read("program/decode_b1/rank0"))
    rotary = next(op for op in program.operators if op.op == "rotary")
    values = {}
    for attribute in rotary.attributes:
        values[attribute.name] = getattr(attribute, attribute.WhichOneof("value"))
    return values


@pytest.mark.parametrize(("family", "rope"), [
    # A null yarn factor is max_position_embeddings / original_max_position_embeddings (256 / 16).
    ("qwen2", {"rope_type": "yarn", "rope_theta": 1e6, "factor": None, "original_max_position_embeddings": 16}),
    # attention_factor is read by yarn only; llama3 and linear ignore it.
    ("llama", {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64, "attention_factor": 0.5}),
    ("llama", {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0, "attention_factor": 0.5}),
    ("qwen2", {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 16,
               "attention_factor": 0.5}),
])
def test_rope_frequencies_and_attention_factor_match_transformers(tiny_checkpoint, tmp_path, family, rope):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    directory = _edited(tiny_checkpoint, family, tmp_path, rope_parameters=rope)
    attributes = _rotary_attributes(prepare_checkpoint(directory, SMALL))
    attributes.pop("head_dim")
    inv_freq, attention_factor = rope_frequencies(**attributes)
    config = AutoConfig.from_pretrained(directory)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(config)
    rotary = model.model.rotary_emb
    np.testing.assert_array_equal(inv_freq, rotary.inv_freq.numpy())
    assert attention_factor == pytest.approx(rotary.attention_scaling, rel=1e-12)


@pytest.mark.parametrize("missing", ["factor", "low_freq_factor", "high_freq_factor"])
def test_llama3_rope_without_a_required_parameter_names_it(tiny_checkpoint, tmp_path, missing):
    rope = {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 64}
    del rope[missing]
    directory = _edited(tiny_checkpoint, "llama", tmp_path, rope_parameters=rope)
    with pytest.raises(UnsupportedCheckpoint, match=missing):
        prepare_checkpoint(directory, SMALL)


def test_a_null_dtype_falls_back_to_torch_dtype(tiny_checkpoint, tmp_path):
    directory = _edited(tiny_checkpoint, "qwen2", tmp_path, dtype=None, torch_dtype="bfloat16")
    assert read_checkpoint(directory).stored_dtype == "bfloat16"


@pytest.mark.parametrize("changes", [
    # A non-empty v4 rope_scaling replaces rope_parameters; theta then comes from the top level.
    {"rope_scaling": {"rope_type": "linear", "factor": 2.0}, "rope_theta": 7000.0,
     "rope_parameters": {"rope_type": "default", "rope_theta": 5000.0}},
    {"rope_scaling": {"type": "linear", "factor": 2.0}, "rope_theta": 7000.0, "rope_parameters": _ABSENT},
    {"rope_scaling": None, "rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 5000.0}},
    # No theta anywhere: transformers' default 10000.
    {"rope_parameters": {"rope_type": "default"}, "rope_theta": _ABSENT},
    {"rope_parameters": {"rope_type": "default"}, "rope_theta": 7000.0},
])
def test_rope_sources_are_read_with_transformers_precedence(tiny_checkpoint, tmp_path, changes):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    directory = _edited(tiny_checkpoint, "mistral", tmp_path, **changes)
    attributes = _rotary_attributes(prepare_checkpoint(directory, SMALL))
    attributes.pop("head_dim")
    inv_freq, attention_factor = rope_frequencies(**attributes)
    with torch.device("cpu"):
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(directory))
    np.testing.assert_array_equal(inv_freq, model.model.rotary_emb.inv_freq.numpy())
    assert attention_factor == model.model.rotary_emb.attention_scaling
