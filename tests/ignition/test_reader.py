"""The checkpoint reader: both config forms, safetensors (sharded, bf16), templates, EOS ids,
generation recommendations, and precise failures."""

from __future__ import annotations

import json
import shutil
import struct

import numpy as np
import pytest

from helios.ignition.reader import (
    MalformedCheckpointFile,
    MissingCheckpointFile,
    UnsupportedCheckpoint,
    bf16_bits_to_float32,
    float32_to_bf16_bits,
    read_checkpoint,
)


def _write_safetensors(path, tensors: dict[str, tuple[str, tuple[int, ...], bytes]]) -> None:
    header, offset, blobs = {}, 0, []
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


def _copy(tiny_checkpoint, family, tmp_path):
    target = tmp_path / family
    shutil.copytree(tiny_checkpoint(family), target)
    return target


def test_v4_and_v5_configs_read_alike(tiny_checkpoint):
    v5 = read_checkpoint(tiny_checkpoint("llama"))
    v4 = read_checkpoint(tiny_checkpoint("llama", "v4"))
    assert "rope_parameters" in v5.config and "rope_theta" in v4.config
    assert v5.rope == v4.rope
    assert v5.rope.rope_type == "llama3" and v5.rope.theta == 500000.0
    assert v5.rope.get("factor") == 8.0 and v5.rope.get("original_max_position_embeddings") == 64.0
    assert v5.stored_dtype == v4.stored_dtype == "float32"


def test_default_rope_without_scaling_in_v4(tiny_checkpoint):
    checkpoint = read_checkpoint(tiny_checkpoint("mistral", "v4"))
    assert checkpoint.rope.rope_type == "default" and checkpoint.rope.scaling == ()


def test_tensors_match_the_safetensors_library(tiny_checkpoint):
    from safetensors.numpy import load_file

    directory = tiny_checkpoint("qwen3")
    expected = load_file(directory / "model.safetensors")
    checkpoint = read_checkpoint(directory)
    assert sorted(checkpoint.tensors) == sorted(expected)
    for name, values in expected.items():
        np.testing.assert_array_equal(checkpoint.tensors.float32(name), values)


def test_sharded_checkpoint_with_index(tiny_checkpoint, tmp_path):
    from safetensors.numpy import load_file, save_file

    directory = _copy(tiny_checkpoint, "qwen2", tmp_path)
    tensors = load_file(directory / "model.safetensors")
    (directory / "model.safetensors").unlink()
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[::2], "model-00002-of-00002.safetensors": names[1::2]}
    weight_map = {}
    for shard, members in shards.items():
        save_file({n: tensors[n] for n in members}, directory / shard)
        weight_map.update({n: shard for n in members})
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    checkpoint = read_checkpoint(directory)
    assert sorted(checkpoint.tensors) == names
    for name in names:
        np.testing.assert_array_equal(checkpoint.tensors.float32(name), tensors[name])
    weight_map[names[0]] = "model-00002-of-00002.safetensors" if weight_map[names[0]].startswith("model-00001") \
        else "model-00001-of-00002.safetensors"
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(MalformedCheckpointFile, match=names[0]):
        read_checkpoint(directory)


def test_bf16_tensors_widen_exactly(tmp_path, tiny_checkpoint):
    directory = _copy(tiny_checkpoint, "mistral", tmp_path)
    values = np.array([1.0, -2.5, 3.140625, 1e-3, -0.0], dtype=np.float32)
    bits = float32_to_bf16_bits(values)
    _write_safetensors(directory / "extra.safetensors", {"extra.weight": ("BF16", (5,), bits.tobytes())})
    checkpoint = read_checkpoint(directory)
    assert checkpoint.tensors.info("extra.weight").dtype == "BF16"
    np.testing.assert_array_equal(checkpoint.tensors.float32("extra.weight"), bf16_bits_to_float32(bits))


def test_bf16_rounding_is_to_nearest_even():
    # 1 + 2^-8 lies halfway between bf16 neighbours 1 and 1 + 2^-7: ties go to the even one (1).
    # 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: ties go to 1 + 2^-6.
    values = np.array([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-8 + 2**-20, np.nan], dtype=np.float32)
    widened = bf16_bits_to_float32(float32_to_bf16_bits(values))
    assert widened[0] == 1.0 and widened[1] == 1 + 2**-6 and widened[2] == 1 + 2**-7
    assert np.isnan(widened[3])


def test_chat_template_sources(tiny_checkpoint, tmp_path):
    assert "<|start_header_id|>" in read_checkpoint(tiny_checkpoint("llama")).chat_template  # chat_template.jinja
    assert "<|im_start|>" in read_checkpoint(tiny_checkpoint("qwen2")).chat_template  # tokenizer_config.json
    directory = _copy(tiny_checkpoint, "qwen2", tmp_path)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "TOOLS"}, {"name": "default", "template": "PLAIN"}]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    assert read_checkpoint(directory).chat_template == "PLAIN"
    del config["chat_template"]
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    assert read_checkpoint(directory).chat_template is None


def test_eos_ids_are_the_union_of_every_source(tiny_checkpoint, tmp_path):
    llama = read_checkpoint(tiny_checkpoint("llama"))
    assert llama.eos_token_ids == (257, 260)  # <|end_of_text|>, <|eot_id|>
    assert llama.bos_token_id == 256
    directory = _copy(tiny_checkpoint, "qwen2", tmp_path)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [256, 258]}))
    assert read_checkpoint(directory).eos_token_ids == (256, 258)


def test_generation_recommendations(tiny_checkpoint, tmp_path):
    checkpoint = read_checkpoint(tiny_checkpoint("qwen3"))
    assert (checkpoint.generation.temperature, checkpoint.generation.top_p, checkpoint.generation.top_k) == (
        pytest.approx(0.7), pytest.approx(0.8), 20)
    directory = _copy(tiny_checkpoint, "qwen3", tmp_path)
    (directory / "generation_config.json").write_text(json.dumps({"do_sample": False, "temperature": 0.6}))
    assert read_checkpoint(directory).generation.temperature == 0.0
    (directory / "generation_config.json").write_text(json.dumps({"top_p": 1.5}))
    with pytest.raises(MalformedCheckpointFile, match="top_p"):
        read_checkpoint(directory)


def test_missing_and_malformed_files_are_named(tiny_checkpoint, tmp_path):
    directory = _copy(tiny_checkpoint, "mistral", tmp_path)
    (directory / "config.json").write_text("{not json")
    with pytest.raises(MalformedCheckpointFile, match="config.json"):
        read_checkpoint(directory)
    (directory / "config.json").unlink()
    with pytest.raises(MissingCheckpointFile, match="config.json"):
        read_checkpoint(directory)
    directory = _copy(tiny_checkpoint, "llama", tmp_path / "b")
    (directory / "tokenizer.json").unlink()
    with pytest.raises(MissingCheckpointFile, match="tokenizer.json"):
        read_checkpoint(directory)


def test_truncated_safetensors_is_rejected(tiny_checkpoint, tmp_path):
    directory = _copy(tiny_checkpoint, "qwen2", tmp_path)
    path = directory / "model.safetensors"
    path.write_bytes(path.read_bytes()[:-16])
    with pytest.raises(MalformedCheckpointFile, match="past the end"):
        read_checkpoint(directory)
    path.write_bytes(struct.pack("<Q", 1 << 40))
    with pytest.raises(MalformedCheckpointFile, match="header length"):
        read_checkpoint(directory)


def test_a_checkpoint_without_eos_is_unsupported(tiny_checkpoint, tmp_path):
    directory = _copy(tiny_checkpoint, "qwen2", tmp_path)
    for name in ("generation_config.json", "tokenizer_config.json"):
        (directory / name).unlink()
    config = json.loads((directory / "config.json").read_text())
    config["eos_token_id"] = None
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedCheckpoint, match="eos_token_id"):
        read_checkpoint(directory)
