"""The Llama-family recipe: what it reads from each variant, what it refuses (one field named), and
the contract, manifest, programs and resources preparation emits."""

from __future__ import annotations

import dataclasses
import json
import shutil

import numpy as np
import pytest

from helios.contract import PreparedContract
from helios.ignition.prepare import InvalidPreparationOptions, PreparationOptions, prepare_checkpoint
from helios.ignition.reader import MissingCheckpointFile, UnsupportedCheckpoint, read_checkpoint
from helios.ignition.recipes.llama_family import lm_head_tensor, parse_config
from helios.proto import contract_pb2, core_pb2, manifest_pb2, program_pb2

C = contract_pb2
SMALL = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,))


def _edited(tiny_checkpoint, family, tmp_path, **changes):
    directory = tmp_path / family
    shutil.copytree(tiny_checkpoint(family), directory)
    config = json.loads((directory / "config.json").read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def test_each_variant_reads_as_data(tiny_checkpoint):
    llama = parse_config(read_checkpoint(tiny_checkpoint("llama")))
    qwen2 = parse_config(read_checkpoint(tiny_checkpoint("qwen2")))
    qwen3 = parse_config(read_checkpoint(tiny_checkpoint("qwen3")))
    mistral = parse_config(read_checkpoint(tiny_checkpoint("mistral")))
    assert llama.rope.rope_type == "llama3" and not llama.qkv_bias and llama.windows == (None, None)
    assert qwen2.qkv_bias and not qwen2.o_bias and qwen2.tie_word_embeddings
    assert lm_head_tensor(qwen2) == "model.embed_tokens.weight"
    assert qwen3.qk_norm and qwen3.head_dim == 24 and qwen3.heads * qwen3.head_dim != qwen3.hidden_size
    assert mistral.windows == (8, 8)


@pytest.mark.parametrize(("changes", "field"), [
    ({"hidden_act": "gelu"}, "hidden_act"),
    ({"num_experts": 8}, "num_experts"),
    ({"model_type": "gpt2"}, "model_type"),
    ({"rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}}, "rope_type"),
    ({"layer_types": ["full_attention", "chunked_attention"]}, "layer_types"),
    ({"quantization_config": {"quant_method": "fp8", "weight_block_size": [128, 128]}}, "quantization_config"),
    ({"rms_norm_eps": "1e-6"}, "rms_norm_eps"),
    ({"partial_rotary_factor": [0.5]}, "partial_rotary_factor"),
    ({"partial_rotary_factor": 1.5}, "partial_rotary_factor"),
])
def test_unsupported_checkpoints_name_the_field(tiny_checkpoint, tmp_path, changes, field):
    directory = _edited(tiny_checkpoint, "mistral", tmp_path, **changes)
    with pytest.raises(UnsupportedCheckpoint, match=field) as error:
        prepare_checkpoint(directory, SMALL)
    assert "\n" not in str(error.value)


def test_untied_checkpoint_without_lm_head_fails(tiny_checkpoint, tmp_path):
    from safetensors.numpy import load_file, save_file

    directory = _edited(tiny_checkpoint, "llama", tmp_path)
    tensors = load_file(directory / "model.safetensors")
    del tensors["lm_head.weight"]
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(MissingCheckpointFile, match="tie_word_embeddings"):
        prepare_checkpoint(directory, SMALL)


def test_qwen_style_sliding_layers(tiny_checkpoint, tmp_path):
    # Qwen3 reads sliding_window only with use_sliding_window (transformers nulls it otherwise).
    directory = _edited(tiny_checkpoint, "qwen3", tmp_path, sliding_window=6, use_sliding_window=True,
                        layer_types=["full_attention", "sliding_attention", "full_attention"])
    cfg = parse_config(read_checkpoint(directory))
    assert cfg.windows == (None, 6, None)
    prepared = prepare_checkpoint(directory, SMALL)
    kinds = [(h.kind, h.window_tokens) for h in prepared.contract.model.cache.histories]
    assert kinds == [(C.HISTORY_KIND_PAGED_KEY_VALUE, 0), (C.HISTORY_KIND_SLIDING_WINDOW, 6),
                     (C.HISTORY_KIND_PAGED_KEY_VALUE, 0), (C.HISTORY_KIND_CONTINUATION, 0)]


def test_preparation_emits_a_valid_contract(tiny_checkpoint):
    prepared = prepare_checkpoint(tiny_checkpoint("mistral"), SMALL)
    contract = PreparedContract.decode(prepared.contract, prepared.manifest)
    assert contract.version == 3 and contract.served_id == "tiny-mistral"
    operations = sorted((g.operation, g.capacity.batch_capacity, g.capacity.packed_token_capacity)
                        for g in prepared.contract.model.graphs)
    assert operations == [(C.OPERATION_INITIALIZATION, 1, 1), (C.OPERATION_INITIALIZATION, 2, 2),
                          (C.OPERATION_RESTORATION, 1, 1), (C.OPERATION_RESTORATION, 2, 2),
                          (C.OPERATION_PREFILL, 1, 8), (C.OPERATION_SCORED_PREFILL, 1, 8), (C.OPERATION_DECODE, 1, 1),
                          (C.OPERATION_DECODE, 2, 2), (C.OPERATION_MIXED, 2, 9)]
    histories = prepared.contract.model.cache.histories
    assert [h.kind for h in histories] == [C.HISTORY_KIND_SLIDING_WINDOW] * 2 + [C.HISTORY_KIND_CONTINUATION]
    assert histories[0].window_tokens == 8 and list(histories[0].planes) == ["layer0.key", "layer0.value"]
    # continuation storage: a plane of one row a request slot beside each cache plane (docs/snapshots.md)
    assert list(histories[2].planes) == [f"continuation.layer{i}.{kv}" for i in (0, 1) for kv in ("key", "value")]
    assert prepared.contract.snapshot_capacity == 2
    cache = [b for b in prepared.manifest.buffers if b.role == manifest_pb2.BUFFER_ROLE_CACHE]
    assert len(cache) == 4 and all(b.shape[0] == 0 for b in cache)
    fields = {slot.field for slot in prepared.manifest.completion.fields}
    assert manifest_pb2.COMPLETION_FIELD_MODEL_RESERVED in fields and manifest_pb2.COMPLETION_FIELD_DRAFT_CURSOR in fields
    # scored prefill: the rows of the largest chunk, the target's log-probability then the top 20, and their ids
    buffers = {b.name: list(b.shape) for b in prepared.manifest.buffers}
    assert {manifest_pb2.COMPLETION_FIELD_PROMPT_SCORES, manifest_pb2.COMPLETION_FIELD_PROMPT_SCORE_IDS} <= fields
    assert buffers["completion.prompt_scores"] == [8, 21] and buffers["completion.prompt_score_ids"] == [8, 20]
    scored = next(g for g in prepared.contract.model.graphs if g.operation == C.OPERATION_SCORED_PREFILL)
    assert any(b.source == C.VALUE_SOURCE_SCORED_PREFILL_TARGETS and b.indexing == C.INDEXING_PACKED_TOKEN
               and b.padding == -1 for b in scored.value_bindings)
    defaults = prepared.contract.defaults.sampling
    assert defaults.temperature == pytest.approx(0.7) and defaults.top_k == 20
    frontend = prepared.contract.model.frontend
    assert list(frontend.eos_token_ids) == [258]
    assert (frontend.tool_parser, frontend.reasoning_parser) == (C.TOOL_PARSER_NONE, C.REASONING_PARSER_NONE)


@pytest.mark.parametrize("pending_token", ["device", "host"])
def test_programs_are_the_same_operators_at_every_capacity(tiny_checkpoint, pending_token):
    prepared = prepare_checkpoint(tiny_checkpoint("llama"), dataclasses.replace(SMALL, pending_token=pending_token))
    programs = {}
    for handle in prepared.manifest.graphs:
        programs[handle.name] = program_pb2.Program.FromString(prepared.read(handle.program_resources[0]))
    initialization = {g.name for g in prepared.contract.model.graphs if g.operation == C.OPERATION_INITIALIZATION}
    assert initialization == {"initialization", "initialization_b2"}  # one a batch capacity, the same operators
    assert len({tuple(op.op for op in programs[name].operators) for name in initialization}) == 1
    restoration = {g.name for g in prepared.contract.model.graphs if g.operation == C.OPERATION_RESTORATION}
    assert restoration == {"restoration_b1", "restoration_b2"}  # one a batch capacity, the same operators
    assert {tuple(op.op for op in programs[name].operators) for name in restoration} == {
        ("page_snapshot", "page_restore") * 4 + ("copy", "fill", "fill", "copy", "fill", "fill", "fill")}
    scored = {g.name for g in prepared.contract.model.graphs if g.operation == C.OPERATION_SCORED_PREFILL}
    text = [name for name in programs if name not in initialization | scored | restoration]
    lanes = {handle.name: handle.batch_capacity for handle in prepared.manifest.graphs}
    slots = max(SMALL.batch_capacities)
    sequences = {tuple(op.op for op in programs[name].operators) for name in text if lanes[name] == slots}
    assert len(sequences) == 1
    (sequence,) = sequences
    # a graph of fewer lanes than slots (decode_b1, every prefill) runs the head and the sampler over
    # its submission rows: the same operators, plus six gathers (hidden row, seed, position, parameters,
    # histogram, grammar mask), the sampled slots' fill and the scatter back to them
    fewer = {tuple(op.op for op in programs[name].operators) for name in text if lanes[name] < slots}
    assert len(fewer) == 1
    (submission,) = fewer
    extra = list(submission)
    for op in sequence:
        extra.remove(op)
    assert sorted(extra) == ["fill", "gather", "gather", "gather", "gather", "gather", "gather", "scatter"]
    # a scored prefill is the same program plus the scores of every row: a norm, the logits, prompt_scores
    for name in scored:
        ops = [op.op for op in programs[name].operators]
        extra = list(ops)
        for op in submission:
            extra.remove(op)
        assert sorted(extra) == ["logits", "prompt_scores", "rms_norm"] and programs[name].operator_set_version == 4
    head = ("embedding",) if pending_token == "host" else ("gather", "where", "embedding")
    assert sequence[:len(head)] == head and "sample" in sequence and "paged_attention" in sequence
    init_ops = {op.op for op in programs["initialization"].operators}
    assert init_ops <= {"copy", "fill"} and init_ops
    graph = next(g for g in prepared.contract.model.graphs if g.name == "decode_b2")
    sources = {b.source for b in graph.value_bindings}
    assert {C.VALUE_SOURCE_PROMPT_TOKENS, C.VALUE_SOURCE_PAGE_TABLE,
            C.VALUE_SOURCE_SEED_BITS, C.VALUE_SOURCE_SAMPLING_PARAMETERS} <= sources
    assert (C.VALUE_SOURCE_PENDING_TOKEN in sources) == (pending_token == "host")
    weights = {d.resource for d in programs["decode_b2"].tensors if d.role == program_pb2.TENSOR_ROLE_WEIGHT}
    assert weights == set(graph.resource_dependencies) - {"program/decode_b2/rank0"}


def test_frontend_detection_from_template_text(tiny_checkpoint, tmp_path):
    qwen3 = prepare_checkpoint(tiny_checkpoint("qwen3"), SMALL).contract.model.frontend
    assert qwen3.reasoning_parser == C.REASONING_PARSER_THINK
    assert (qwen3.reasoning_syntax.open, qwen3.reasoning_syntax.close) == ("<think>", "</think>")
    assert qwen3.prompt_syntax.assistant_open == "<|im_start|>assistant\n"
    assert qwen3.prompt_syntax.message_end == "<|im_end|>"
    assert {t.text for t in qwen3.template_tokens} >= {"<|im_start|>", "<|im_end|>", "<think>"}
    directory = tmp_path / "coder"
    shutil.copytree(tiny_checkpoint("qwen3"), directory)
    template = (directory / "chat_template.jinja").read_text()
    (directory / "chat_template.jinja").write_text(
        template + "{% if tools %}<tool_call>\n<function=name>\n<parameter=x>\n1\n</parameter>\n</function>\n"
                   "</tool_call>{% endif %}")
    coder = prepare_checkpoint(directory, SMALL).contract.model.frontend
    assert coder.tool_parser == C.TOOL_PARSER_QWEN_CODER and coder.tool_syntax.opener == "<tool_call>"


def test_bf16_weights_are_rounded_fp32_weights(tiny_checkpoint):
    from helios.ignition.reader import float32_to_bf16_bits

    fp32 = prepare_checkpoint(tiny_checkpoint("qwen2"), SMALL)
    bf16 = prepare_checkpoint(tiny_checkpoint("qwen2"), PreparationOptions(
        dtype="bf16", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,)))
    name = "weight/model.layers.0.self_attn.q_proj.weight"
    values = np.frombuffer(fp32.read(name), dtype="<f4")
    assert bf16.read(name) == float32_to_bf16_bits(values).tobytes()
    cache = [b for b in bf16.manifest.buffers if b.role == manifest_pb2.BUFFER_ROLE_CACHE]
    assert {b.dtype for b in cache} == {manifest_pb2.DTYPE_BF16}


def test_resources_cover_every_kind(tiny_checkpoint):
    prepared = prepare_checkpoint(tiny_checkpoint("qwen2"), SMALL)
    kinds = {r.kind for r in prepared.resources}
    assert kinds == {core_pb2.RESOURCE_KIND_PROGRAM, core_pb2.RESOURCE_KIND_WEIGHT, core_pb2.RESOURCE_KIND_TOKENIZER,
                     core_pb2.RESOURCE_KIND_CHAT_TEMPLATE, core_pb2.RESOURCE_KIND_WEIGHT_CATALOG,
                     core_pb2.RESOURCE_KIND_REBUILD_MANIFEST}
    # Tied embeddings: no lm_head resource, the head reads the embedding table.
    assert "weight/lm_head.weight" not in prepared.by_id
    catalog = core_pb2.WeightCatalog.FromString(prepared.read("weight_catalog/rank0"))
    assert {e.resource for e in catalog.entries} == {
        r.id for r in prepared.resources if r.kind == core_pb2.RESOURCE_KIND_WEIGHT}
    rebuild = core_pb2.RebuildManifest.FromString(prepared.read("rebuild_manifest"))
    assert rebuild.recipe == "llama_family" and len(rebuild.checkpoint_digest) == 64


def test_v4_and_v5_checkpoints_give_the_same_programs(tiny_checkpoint):
    v5 = prepare_checkpoint(tiny_checkpoint("llama"), SMALL)
    v4 = prepare_checkpoint(tiny_checkpoint("llama", "v4"), SMALL)
    for resource in v5.resources:
        if resource.kind in (core_pb2.RESOURCE_KIND_PROGRAM, core_pb2.RESOURCE_KIND_WEIGHT):
            assert v4.read(resource.id) == resource.data, resource.id


@pytest.mark.parametrize(("options", "flag"), [
    (dict(dtype="fp16"), "--dtype"),
    (dict(batch_capacities=(2, 2)), "--batch-capacities"),
    (dict(prefill_capacities=()), "--prefill-capacities"),
    (dict(page_tokens=0), "--page-tokens"),
])
def test_invalid_options_name_the_flag(options, flag):
    with pytest.raises(InvalidPreparationOptions, match=flag):
        PreparationOptions(**options)


def test_context_beyond_the_model_is_refused(tiny_checkpoint):
    with pytest.raises(InvalidPreparationOptions, match="max_position_embeddings"):
        prepare_checkpoint(tiny_checkpoint("qwen2"), PreparationOptions(context_tokens=100000))


def test_graphs_of_fewer_lanes_than_slots_sample_their_submission_rows_only(tiny_checkpoint):
    options = dataclasses.replace(SMALL, batch_capacities=(1, 2, 4))
    prepared = prepare_checkpoint(tiny_checkpoint("qwen3"), options)
    graphs = {g.name: g for g in prepared.contract.model.graphs}
    for name, rows in (("decode_b1", 1), ("decode_b2", 2), ("prefill_p8", 1), ("decode_b4", 4), ("mixed_b4_p11", 4)):
        program = program_pb2.Program.FromString(prepared.read(f"program/{name}/rank0"))
        decls = {d.name: d for d in program.tensors}
        logits = next(op for op in program.operators if op.op == "logits" and "scored." not in op.outputs[0])
        sample = next(op for op in program.operators if op.op == "sample")
        assert list(decls[logits.outputs[0]].shape)[0] == rows, name
        assert list(decls[sample.outputs[0]].shape) == [rows], name
        slots = [b for b in graphs[name].value_bindings if b.destination.startswith("submission_slots")]
        if rows < 4:  # the lanes' slots, in submission order, -1 on padding rows
            assert [(b.source, b.indexing, b.padding) for b in slots] == [
                (C.VALUE_SOURCE_SLOT, C.INDEXING_SUBMISSION_ROW, -1)], name
            assert decls["submission_slots"].shape == [rows]
        else:
            assert slots == [], name


def test_yarn_parameters_reach_the_rotary_operator(tiny_checkpoint, tmp_path):
    rope = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 16,
            "beta_fast": 16.0, "truncate": False}
    directory = _edited(tiny_checkpoint, "qwen2", tmp_path, rope_parameters=rope)
    prepared = prepare_checkpoint(directory, SMALL)
    program = program_pb2.Program.FromString(prepared.read("program/decode_b1/rank0"))
    rotary = next(op for op in program.operators if op.op == "rotary")
    attributes = {a.name: a for a in rotary.attributes}
    assert attributes["rope_type"].s == "yarn" and attributes["factor"].f == 4.0
    assert attributes["beta_fast"].f == 16.0 and attributes["truncate"].b is False
    assert attributes["original_max_position_embeddings"].i == 16


def test_a_bf16_checkpoint_is_copied_bit_for_bit(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from tests.fixtures.checkpoints import make_checkpoint

    directory = make_checkpoint("qwen2", tmp_path / "bf16")
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.bfloat16)
    model.save_pretrained(directory)
    checkpoint = read_checkpoint(directory)
    assert checkpoint.stored_dtype == "bfloat16"
    name = "model.layers.1.mlp.up_proj.weight"
    assert checkpoint.tensors.info(name).dtype == "BF16"
    prepared = prepare_checkpoint(directory, PreparationOptions(dtype="bf16", page_tokens=4, batch_capacities=(1,),
                                                                prefill_capacities=(8,)))
    assert prepared.read(f"weight/{name}") == checkpoint.tensors.raw(name).tobytes()


def test_scored_prefill_graphs_need_their_score_fields(tiny_checkpoint):
    """A contract with SCORED_PREFILL graphs records their scores, in buffers covering the largest
    scored chunk; without the fields (or with narrower rows) it fails decoding naming the record."""
    from helios.contract.errors import InvalidCompletionLayout

    prepared = prepare_checkpoint(tiny_checkpoint("mistral"), SMALL)
    manifest = manifest_pb2.ExecutionManifest()
    manifest.CopyFrom(prepared.manifest)
    kept = [s for s in manifest.completion.fields if s.field != manifest_pb2.COMPLETION_FIELD_PROMPT_SCORE_IDS]
    del manifest.completion.fields[:]
    manifest.completion.fields.extend(kept)
    with pytest.raises(InvalidCompletionLayout, match="PROMPT_SCORES and PROMPT_SCORE_IDS"):
        PreparedContract.decode(prepared.contract, manifest)
    manifest.CopyFrom(prepared.manifest)
    next(b for b in manifest.buffers if b.name == "completion.prompt_score_ids").shape[:] = [4, 20]
    with pytest.raises(InvalidCompletionLayout, match=r"R >= 8"):
        PreparedContract.decode(prepared.contract, manifest)
