"""`--tp N` preparation: one program per rank for every graph and one weight catalog per rank;
column-parallel q/k/v and gate/up, row-parallel o and down followed by all_reduce, a
vocabulary-parallel embedding and head (all_gather), key/value heads split or replicated; a
model the ranks cannot split, and a drafter with ranks, are refused in one line."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helios.contract import PreparedContract
from helios.contract.catalogs import read_weight_catalog
from helios.ignition.prepare import InvalidPreparationOptions, PreparationOptions, prepare_checkpoint
from helios.ignition.reader import UnsupportedCheckpoint, read_checkpoint
from helios.proto import core_pb2, manifest_pb2, program_pb2
from tests.ignition.test_recipe import _edited


@pytest.fixture(scope="module")
def biased_llama(tmp_path_factory):
    """A tiny Llama with attention and MLP biases (o and down carry one: the row-parallel biases)."""
    from tests.fixtures.checkpoints import make_checkpoint

    return make_checkpoint("llama", tmp_path_factory.mktemp("biased") / "tiny-llama-biased",
                           overrides={"attention_bias": True, "mlp_bias": True})

SMALL = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,),
                           context_tokens=32)


def _program(core, graph: str, rank: int) -> program_pb2.Program:
    return program_pb2.Program.FromString(core.read(f"program/{graph}/rank{rank}"))


def _weights(program: program_pb2.Program) -> dict[str, tuple[str, list[int]]]:
    return {d.name: (d.resource, list(d.shape)) for d in program.tensors if d.role == program_pb2.TENSOR_ROLE_WEIGHT}


def test_two_ranks_hold_their_heads_features_and_vocabulary(tiny_checkpoint):
    directory = tiny_checkpoint("llama")  # 4 heads, 2 kv heads of 16, intermediate 96, vocabulary 288
    core = prepare_checkpoint(directory, dataclasses.replace(SMALL, tensor_parallel=2))
    PreparedContract.decode(core.contract, core.manifest)
    assert core.manifest.ranks == 2
    for handle in core.manifest.graphs:
        assert list(handle.program_resources) == [f"program/{handle.name}/rank0", f"program/{handle.name}/rank1"]
    cache = [b for b in core.manifest.buffers if b.role == manifest_pb2.BUFFER_ROLE_CACHE]
    assert all(list(b.shape) == [0, 4, 1, 16] for b in cache)  # each rank: one of the two kv heads

    checkpoint = read_checkpoint(directory)
    for rank in (0, 1):
        program = _program(core, "decode_b2", rank)
        assert program.rank == rank and program.operator_set_version == 4
        weights = _weights(program)
        assert weights["model.layers.0.self_attn.q_proj.weight"] == (
            f"weight/model.layers.0.self_attn.q_proj.weight/rows{32 * rank}-{32 * rank + 32}", [32, 64])
        assert weights["model.layers.0.self_attn.k_proj.weight"][1] == [16, 64]
        assert weights["model.layers.0.self_attn.o_proj.weight"][1] == [64, 32]
        assert weights["model.layers.0.mlp.gate_proj.weight"][1] == [48, 64]
        assert weights["model.layers.0.mlp.down_proj.weight"][1] == [64, 48]
        assert weights["model.embed_tokens.weight"][1] == weights["lm_head.weight"][1] == [144, 64]
        assert weights["model.layers.0.input_layernorm.weight"] == ("weight/model.layers.0.input_layernorm.weight", [64])
        ops = [o.op for o in program.operators]
        # embedding, then per layer o and down, summed; the head's columns gathered
        assert ops.count("all_reduce") == 1 + 2 * 2 and ops.count("all_gather") == 1
        embedding = next(o for o in program.operators if o.op == "embedding")
        assert [a.i for a in embedding.attributes if a.name == "row_offset"] == ([144] if rank else [])
        # a weight resource holds exactly the rank's part of the stored tensor
        resource, _ = weights["model.layers.1.mlp.down_proj.weight"]
        stored = np.frombuffer(core.read(resource), "<f4").reshape(64, 48)
        whole = checkpoint.tensors.float32("model.layers.1.mlp.down_proj.weight")
        assert np.array_equal(stored, whole[:, 48 * rank:48 * rank + 48])
        catalog = read_weight_catalog(core.read(f"weight_catalog/rank{rank}"))
        assert catalog.rank == rank
        entries = {e.source_tensor: e for e in catalog.entries}
        assert entries["model.layers.1.mlp.down_proj.weight"].transform == f"columns[{48 * rank}:{48 * rank + 48}]"
        assert entries["model.norm.weight"].transform == "none"
        assert len(entries) == len(catalog.entries) == len(weights)  # what the rank reads, each once


def test_four_ranks_replicate_the_two_kv_heads_and_share_their_resources(tiny_checkpoint):
    core = prepare_checkpoint(tiny_checkpoint("qwen2"), dataclasses.replace(SMALL, tensor_parallel=4))
    k = [_weights(_program(core, "prefill_p8", r))["model.layers.0.self_attn.k_proj.weight"][0] for r in range(4)]
    bias = [_weights(_program(core, "prefill_p8", r))["model.layers.0.self_attn.k_proj.bias"] for r in range(4)]
    # ranks 0 and 1 read kv head 0, ranks 2 and 3 kv head 1: one resource per head
    assert k[0] == k[1] != k[2] == k[3] and k[2].endswith("rows16-32")
    assert bias[0] == bias[1] and bias[0][1] == [16]
    weight_ids = [r.id for r in core.resources if r.kind == core_pb2.RESOURCE_KIND_WEIGHT]
    assert len(weight_ids) == len(set(weight_ids))
    # tied embeddings: the head reads the embedding's slice of each rank
    head = _weights(_program(core, "decode_b1", 3))
    assert head["model.embed_tokens.weight"][0].endswith("rows216-288")


def test_row_parallel_biases_are_added_by_rank_zero_alone(biased_llama):
    core = prepare_checkpoint(biased_llama, dataclasses.replace(SMALL, tensor_parallel=2))
    first, second = (_weights(_program(core, "decode_b1", r)) for r in (0, 1))
    row_parallel = ("model.layers.0.self_attn.o_proj.bias", "model.layers.0.mlp.down_proj.bias")
    assert all(name in first for name in row_parallel) and not any(name in second for name in row_parallel)
    assert first["model.layers.0.self_attn.q_proj.bias"][1] == second["model.layers.0.self_attn.q_proj.bias"][1] == [32]
    assert second["model.layers.0.mlp.up_proj.bias"][1] == [48]
    second_catalog = read_weight_catalog(core.read("weight_catalog/rank1"))
    assert not any(e.source_tensor in row_parallel for e in second_catalog.entries)


@pytest.mark.parametrize(("changes", "ranks", "field"), [
    ({}, 3, "num_attention_heads = 4 is not divisible by 3 ranks"),
    ({"intermediate_size": 90}, 4, "intermediate_size = 90 is not divisible by 4 ranks"),
    ({"vocab_size": 290}, 4, "vocab_size = 290 is not divisible by 4 ranks"),
    ({"num_attention_heads": 6, "head_dim": 16, "num_key_value_heads": 3}, 2,
     "num_key_value_heads = 3 neither divides nor is divisible by 2 ranks"),
])
def test_a_model_the_ranks_cannot_split_is_refused_naming_the_field(tiny_checkpoint, tmp_path, changes, ranks, field):
    directory = _edited(tiny_checkpoint, "llama", tmp_path, **changes) if changes else tiny_checkpoint("llama")
    with pytest.raises(UnsupportedCheckpoint, match=f"--tp {ranks}: config.json: {field}"):
        prepare_checkpoint(directory, dataclasses.replace(SMALL, tensor_parallel=ranks))


def test_a_drafter_with_ranks_and_a_rank_count_below_one_are_refused(tiny_checkpoint):
    with pytest.raises(InvalidPreparationOptions, match="--draft with --tp 2: speculative programs on tensor-parallel"):
        dataclasses.replace(SMALL, tensor_parallel=2, draft=tiny_checkpoint("llama"))
    with pytest.raises(InvalidPreparationOptions, match="--tp must be >= 1"):
        dataclasses.replace(SMALL, tensor_parallel=0)


def test_one_rank_cores_are_unchanged_by_the_option(tiny_checkpoint):
    core = prepare_checkpoint(tiny_checkpoint("mistral"), SMALL)
    assert core.manifest.ranks == 1
    programs = {h.name: _program(core, h.name, 0) for h in core.manifest.graphs}
    # version 4 only where the program scores prompts (prompt_scores), 5 where it restores (page_snapshot,
    # page_restore); no collective or row offset anywhere
    assert all(p.operator_set_version <= 3 for name, p in programs.items()
               if not name.startswith(("scored_prefill", "restoration")))
    assert {p.operator_set_version for name, p in programs.items() if name.startswith("restoration")} == {5}
    assert not any(o.op in ("all_reduce", "all_gather") or "row_offset" in o.attributes
                   for p in programs.values() for o in p.operators)
