"""A latent family (dense DeepSeek-V3: multi-head latent attention over paged latent histories) on the
reference side, fp32 on CPU: the core declares one PAGED_LATENT region a layer (the latent and the
rotary key, one record a token) and the per-head decompression parts; every logit of the sequential
reference engine equals transformers' within 1e-4 relative and 32 greedy tokens are equal (also with
one q_proj product, biases and plain rotary pairs); the batching scheduler over the reference
executor (prefill, decode and mixed rounds) gives each request transformers' tokens; a request of a
prompt already served reuses its pages (the latent planes are paged like key/value planes) and
generates the same tokens, and so does one whose pages come back from the host tier; a latent region declared in a way the runtime cannot serve, and a
mixture-of-experts configuration, are refused in one line."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from helios.engine.worker import BatchingRuntime
from helios.ignition.prepare import prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.interface import PreparedRequest
from helios.runtime.request import GenerationRequest
from tests.recurrent.helpers import (
    GREEDY,
    OPTIONS,
    PROMPT,
    PROMPTS,
    C,
    assert_batched_mixed_rounds_give_transformers_tokens,
    batching,
)

FAMILY = "deepseek_v3"


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint):
    return tiny_checkpoint(FAMILY)


@pytest.fixture(scope="module")
def core(checkpoint):
    return prepare_checkpoint(checkpoint, OPTIONS)


def _parity(engine: ReferenceEngine, model, prompt: tuple[int, ...] = PROMPT) -> list[int]:
    from tests.fixtures.hf_oracle import hf_greedy, hf_teacher_forced_logits

    request = GenerationRequest(prompt, max_tokens=32, sampling=GREEDY, ignore_eos=True)
    tokens = list(engine.generate(request))
    assert tokens == hf_greedy(model, list(prompt), 32)
    assert engine.kept_graphs[:3] == ["initialization", "prefill_p16", "prefill_p8"], engine.kept_graphs
    ours = np.stack([kept["logits"][0] for kept in engine.kept[2:19]])  # the prompt + 16 decode steps
    reference = hf_teacher_forced_logits(model, list(prompt), tokens[:16])
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 1e-4, f"largest relative logit error {relative:.3g}"
    return tokens


def test_the_core_declares_a_paged_latent_region_per_layer_and_per_head_weights(core):
    regions = [r for r in core.contract.model.cache.histories if r.kind == C.HISTORY_KIND_PAGED_LATENT]
    assert [r.name for r in regions] == ["layer0", "layer1"]
    buffers = {b.name: b for b in core.manifest.buffers}
    for i, region in enumerate(regions):
        assert list(region.planes) == [f"layer{i}.latent", f"layer{i}.rope_key"] and region.tokens_per_record == 1
        assert list(buffers[f"layer{i}.latent"].shape) == [0, 4, 1, 32]  # pages of 4 records, kv_lora_rank
        assert list(buffers[f"layer{i}.rope_key"].shape) == [0, 4, 1, 8]  # qk_rope_head_dim
        for plane in region.planes:  # the snapshot's partial pages of each plane
            assert list(buffers[f"continuation.{plane}"].shape)[1:] == list(buffers[plane].shape)[1:]
    assert not any(r.kind == C.HISTORY_KIND_PAGED_KEY_VALUE for r in core.contract.model.cache.histories)
    from helios.proto import core_pb2

    catalog = core_pb2.WeightCatalog.FromString(core.read("weight_catalog/rank0"))
    shapes = {e.transform: list(e.shape) for e in catalog.entries
              if e.source_tensor == "model.layers.0.self_attn.kv_b_proj.weight"}
    # W_uk^T [heads, L, nope] absorbed into the query, W_uv [heads, v, L] applied to the latent output
    assert shapes == {"heads4x28[0:16].per_head.transposed": [4, 32, 16], "heads4x28[16:28].per_head": [4, 12, 32]}


def test_logits_and_greedy_tokens_match_transformers(core, hf_model):
    _parity(ReferenceEngine.load(core, keep=("logits",)), hf_model(FAMILY))


def test_one_q_product_biases_plain_rotary_pairs_and_yarn_match_transformers(tmp_path):
    """The config's other layouts: q_lora_rank null (one q_proj), attention_bias (q/kv_a/o biases
    split like their products), rope_interleave false (no permutation of the rotary rows), and a yarn
    rope whose mscale_all_dim scales the softmax (transformers' yarn_apply_mscale)."""
    from tests.fixtures.checkpoints import make_checkpoint
    from tests.fixtures.hf_oracle import load_hf_model

    yarn = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 64,
            "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32.0, "beta_slow": 1.0}
    directory = make_checkpoint(FAMILY, tmp_path / "variant", seed=3, rope_parameters=yarn,
                                overrides={"q_lora_rank": None, "attention_bias": True, "rope_interleave": False})
    from helios.ignition.reader import read_checkpoint
    from helios.ignition.recipes.deepseek_v3 import parse_config

    cfg = parse_config(read_checkpoint(directory))
    assert cfg.q_lora_rank is None and cfg.scale() > 1.2 * cfg.q_dim ** -0.5  # mscale(4, 1)^2 = 1.29
    variant = prepare_checkpoint(directory, OPTIONS)
    _parity(ReferenceEngine.load(variant, keep=("logits",)), load_hf_model(directory))


def test_batched_requests_in_mixed_rounds_give_transformers_tokens(core, hf_model):
    assert_batched_mixed_rounds_give_transformers_tokens(core, hf_model(FAMILY))


def sequential(runtime: BatchingRuntime, requests: list[PreparedRequest]) -> list:
    """Each request served after the previous one finished (so its pages are published first)."""
    import asyncio

    from tests.engine.test_batching_runtime import _collect

    async def main():
        runtime.start()
        try:
            return [await _collect(runtime.submit(r)) for r in requests]
        finally:
            runtime.shutdown()

    return asyncio.run(main())


def test_a_served_prompt_is_reused_from_its_latent_pages(core):
    shared = PROMPT + PROMPTS[2]  # 31 tokens: 7 full pages of 4 reusable (the last token is computed)
    request = GenerationRequest(shared, max_tokens=6, sampling=GREEDY, ignore_eos=True)
    expected = list(ReferenceEngine.load(core, pages=16).generate(request))
    runtime = batching(core, pages=32, max_active=2)
    assert runtime.scheduler.cache.prefix_reuse
    cold, warm = sequential(runtime, [PreparedRequest(name, request, observe_tokens=True) for name in ("a", "b")])
    assert cold.tokens == warm.tokens == expected
    assert cold.terminal.reused_prompt_tokens == 0 and warm.terminal.reused_prompt_tokens == 28



def test_latent_pages_offloaded_to_the_host_tier_come_back_with_the_tokens_of_recomputation(core):
    """The host tier copies the latent planes' pages as it does key/value pages: each re-sent 30-token
    prompt readmits its 7 complete pages from host memory, with the tokens of recomputing them."""
    from tests.engine.test_host_tier import host_runtime, resent_long_prompts, run

    requests = resent_long_prompts(11)
    expected = run(host_runtime(core, 0), requests)
    runtime = host_runtime(core, 64)
    assert run(runtime, requests) == expected
    metrics = runtime.metrics()
    # a page of every plane: 4 records of 32 latent and 8 rotary-key features, two layers, fp32
    assert runtime.executor.page_bytes == 2 * 4 * (32 + 8) * 4
    assert metrics.host_readmitted_pages == 3 * 7
    assert metrics.host_readmitted_bytes == 3 * 7 * runtime.executor.page_bytes

def _variant(core, change):
    from helios.ignition.prepare import PreparedCore
    from helios.proto import contract_pb2, manifest_pb2

    contract, manifest = contract_pb2.ServingContract(), manifest_pb2.ExecutionManifest()
    contract.CopyFrom(core.contract)
    manifest.CopyFrom(core.manifest)
    change(contract, manifest)
    return PreparedCore(contract, manifest, core.resource_list)


def _latent(contract):
    return next(r for r in contract.model.cache.histories if r.kind == C.HISTORY_KIND_PAGED_LATENT)


def _compressed(contract, manifest):  # two tokens a record: the operators write one a token
    _latent(contract).tokens_per_record = 2


def _uneven(contract, manifest):  # a ratio that does not divide a page of 4 tokens
    _latent(contract).tokens_per_record = 3


def _heads(contract, manifest):  # a latent plane of two heads: a record is shared by every head
    plane = next(b for b in manifest.buffers if b.name == _latent(contract).planes[0])
    plane.shape[2] = 2


@pytest.mark.parametrize(("change", "message"), [
    (_compressed, "tokens_per_record = 2 .*compressing several tokens into a record is not built"),
    (_uneven, "tokens_per_record = 3 does not divide a page of 4 tokens"),
    (_heads, r"plane 'layer0.latent' \[0, 4, 2, 32\] does not hold pages of 4 records"),
])
def test_a_latent_region_the_runtime_cannot_serve_fails_load_in_one_line(core, change, message):
    from helios.runtime.packing import UnservedHistoryKind

    with pytest.raises(UnservedHistoryKind, match=message) as caught:
        ReferenceEngine.load(_variant(core, change))
    assert "\n" not in str(caught.value) and "PAGED_LATENT histories" in str(caught.value)


def test_a_mixture_of_experts_configuration_is_refused_in_one_line(checkpoint, tmp_path):
    from helios.ignition.reader import UnsupportedCheckpoint

    directory = shutil.copytree(checkpoint, tmp_path / "moe")
    config = json.loads((directory / "config.json").read_text())
    config["first_k_dense_replace"] = 1
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedCheckpoint, match="first_k_dense_replace = 1 < num_hidden_layers = 2: "
                                                    "mixture-of-experts layers are not supported"):
        prepare_checkpoint(directory, OPTIONS)
