"""A hybrid family with recurrent state (LFM2: gated short convolutions beside attention layers) on
the reference side, fp32 on CPU: every logit of the sequential reference engine equals transformers'
within 1e-4 relative and 32 greedy tokens are equal; the batching scheduler over the reference
executor (several requests, prefill, decode and mixed rounds) gives each request transformers'
tokens; snapshots of the recurrent state through continuation storage resume token-exactly with the
restored state rows byte-equal; no prefix is reused; a core whose recurrent region the runtime cannot
serve fails load in one line."""

from __future__ import annotations

import random

import numpy as np
import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.interface import PreparedRequest
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.engine.test_batching_runtime import serve
from tests.recurrent.helpers import (
    GREEDY,
    OPTIONS,
    PROMPT,
    C,
    assert_batched_mixed_rounds_give_transformers_tokens,
    batching,
    drive,
    state_planes,
)


@pytest.fixture(scope="module")
def checkpoint(tiny_checkpoint):
    return tiny_checkpoint("lfm2")


@pytest.fixture(scope="module")
def core(checkpoint):
    return prepare_checkpoint(checkpoint, OPTIONS)


def test_the_core_declares_a_recurrent_region_and_state_rows_per_request(core):
    regions = {r.name: r for r in core.contract.model.cache.histories}
    recurrent = regions["recurrent_state"]
    assert recurrent.kind == C.HISTORY_KIND_RECURRENT and list(recurrent.layers) == [0, 2]
    assert [r.kind for r in regions.values()].count(C.HISTORY_KIND_PAGED_KEY_VALUE) == 2  # layers 1 and 3
    buffers = {b.name: b for b in core.manifest.buffers}
    slots, snapshot = core.contract.max_concurrency, core.contract.snapshot_capacity
    for plane in recurrent.planes:  # [live rows + snapshot rows, K-1, hidden]
        assert list(buffers[plane].shape) == [slots + snapshot, 2, 64]
    for graph in core.contract.model.graphs:
        expected = 0 if graph.operation == C.OPERATION_INITIALIZATION else 1
        assert graph.state_rows_per_request == expected, graph.name
        bound = {b.source for b in graph.value_bindings}
        assert (C.VALUE_SOURCE_LIVE_STATE_ROWS in bound) == bool(expected), graph.name


def test_logits_and_greedy_tokens_match_transformers(core, checkpoint, hf_model):
    from tests.fixtures.hf_oracle import hf_greedy, hf_teacher_forced_logits

    engine = ReferenceEngine.load(core, keep=("logits",))
    request = GenerationRequest(PROMPT, max_tokens=32, sampling=GREEDY, ignore_eos=True)
    tokens = list(engine.generate(request))
    assert tokens == hf_greedy(hf_model("lfm2"), list(PROMPT), 32)
    assert engine.kept_graphs[:3] == ["initialization", "prefill_p16", "prefill_p8"], engine.kept_graphs
    ours = np.stack([kept["logits"][0] for kept in engine.kept[2:19]])  # the prompt + 16 decode steps
    reference = hf_teacher_forced_logits(hf_model("lfm2"), list(PROMPT), tokens[:16])
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 1e-4, f"largest relative logit error {relative:.3g}"


def test_batched_requests_in_mixed_rounds_give_transformers_tokens(core, hf_model):
    assert_batched_mixed_rounds_give_transformers_tokens(core, hf_model("lfm2"))


@pytest.mark.parametrize("seed", [1, 2])
def test_a_recurrent_state_snapshotted_at_random_endpoints_resumes_token_exactly(core, seed):
    rng = random.Random(seed)
    requests, preempt_at = {}, {}
    for i in range(3):
        sampling = GREEDY if i % 2 else SamplingParams(temperature=0.9, top_k=20, seed=rng.randrange(1000))
        prompt = tuple(rng.randrange(256) for _ in range(rng.randrange(3, 12)))
        requests[f"r{i}"] = GenerationRequest(prompt, max_tokens=rng.randrange(5, 10), sampling=sampling,
                                              ignore_eos=True)
        preempt_at[f"r{i}"] = rng.randrange(1, requests[f"r{i}"].max_tokens)
    # one preempted on a page boundary for certain (a recurrent snapshot takes a row there too)
    first = requests["r0"]
    preempt_at["r0"] = 4 - (len(first.prompt_token_ids) - 1) % 4 if len(first.prompt_token_ids) % 4 else 4
    reference = ReferenceEngine.load(core, pages=16)
    expected = {request_id: list(reference.generate(r)) for request_id, r in requests.items()}
    runtime = batching(core, pages=32)
    buffers = runtime.executor.buffers
    planes = state_planes(core.contract)
    tokens, checked = drive(runtime, requests, preempt_at, lambda plane, row: buffers[plane][row].copy(), planes)
    assert tokens == expected
    counters = runtime.scheduler.counters
    assert counters.snapshots_restored >= 3 and checked == counters.snapshots_restored * len(planes)
    assert counters.recomputed_tokens == 0


def test_without_a_continuation_row_a_preempted_recurrent_request_recomputes_from_the_start(checkpoint):
    from dataclasses import replace

    core = prepare_checkpoint(checkpoint, replace(OPTIONS, snapshot_capacity=0))
    request = GenerationRequest(PROMPT[:9], max_tokens=8, sampling=GREEDY, ignore_eos=True)
    expected = list(ReferenceEngine.load(core, pages=16).generate(request))
    runtime = batching(core, pages=32)
    tokens, _ = drive(runtime, {"r": request}, {"r": 3}, lambda plane, row: None, [])
    assert tokens == {"r": expected}
    # its state was saved nowhere: every position it had consumed (9 + 3 - 1) is consumed again
    assert runtime.scheduler.counters.recomputed_tokens == len(request.prompt_token_ids) + 2


def test_with_one_continuation_row_the_second_preemption_recomputes_from_the_start(checkpoint):
    """Two requests preempted together: one takes the row (restored, nothing recomputed), the other
    finds none and, its state saved nowhere, consumes every position again; both give the reference's
    tokens."""
    from dataclasses import replace

    core = prepare_checkpoint(checkpoint, replace(OPTIONS, snapshot_capacity=1))
    requests = {f"r{i}": GenerationRequest(prompt, max_tokens=6, sampling=GREEDY, ignore_eos=True)
                for i, prompt in enumerate(((3, 4, 5, 6, 7), (40, 41, 42, 43, 44, 45, 46)))}
    reference = ReferenceEngine.load(core, pages=16)
    expected = {request_id: list(reference.generate(r)) for request_id, r in requests.items()}
    runtime = batching(core, pages=32)
    buffers = runtime.executor.buffers
    tokens, checked = drive(runtime, requests, {"r0": 2, "r1": 2}, lambda plane, row: buffers[plane][row].copy(),
                            state_planes(core.contract))
    assert tokens == expected
    counters = runtime.scheduler.counters
    assert counters.preemptions == 2 and counters.snapshots_restored == 1 and checked == 2
    assert counters.recomputed_tokens in (5 + 1, 7 + 1)  # the unsaved one's prompt and first token, again


def test_a_recurrent_core_reuses_no_prefix(core, hf_model):
    """Pages hold no recurrent state at their ends: a second request with the same prompt recomputes it."""
    from tests.fixtures.hf_oracle import hf_greedy

    runtime = batching(core, pages=64, max_active=1)
    requests = [PreparedRequest(f"r{i}", GenerationRequest(PROMPT, max_tokens=4, sampling=GREEDY, ignore_eos=True),
                                observe_tokens=True) for i in range(2)]
    results = serve(runtime, requests)
    expected = hf_greedy(hf_model("lfm2"), list(PROMPT), 4)
    assert [r.tokens for r in results] == [expected, expected]
    assert runtime.scheduler.counters.reused_tokens == 0
    assert not runtime.scheduler.cache.prefix_reuse


def _variant(core, change):
    from helios.ignition.prepare import PreparedCore
    from helios.proto import contract_pb2, manifest_pb2

    contract, manifest = contract_pb2.ServingContract(), manifest_pb2.ExecutionManifest()
    contract.CopyFrom(core.contract)
    manifest.CopyFrom(core.manifest)
    change(contract, manifest)
    return PreparedCore(contract, manifest, core.resource_list)


def _no_live_rows(contract, manifest):
    graph = next(g for g in contract.model.graphs if g.name == "decode_b1")
    kept = [b for b in graph.value_bindings if b.source != C.VALUE_SOURCE_LIVE_STATE_ROWS]
    del graph.value_bindings[:]
    graph.value_bindings.extend(kept)


def _small_plane(contract, manifest):
    plane = next(r for r in contract.model.cache.histories if r.kind == C.HISTORY_KIND_RECURRENT).planes[0]
    buffer = next(b for b in manifest.buffers if b.name == plane)
    buffer.shape[0] = contract.max_concurrency


def _records(contract, manifest):
    next(r for r in contract.model.cache.histories if r.kind == C.HISTORY_KIND_RECURRENT).tokens_per_record = 2


@pytest.mark.parametrize(("change", "message"), [
    (_no_live_rows, "graph 'decode_b1' binds no LIVE_STATE_ROWS"),
    (_small_plane, "holds 4 state rows, the partition needs 8"),
    (_records, "tokens_per_record = 2"),
])
def test_a_recurrent_region_the_runtime_cannot_serve_fails_load_in_one_line(core, change, message):
    from helios.runtime.packing import UnservedHistoryKind

    with pytest.raises(UnservedHistoryKind, match=message) as caught:
        ReferenceEngine.load(_variant(core, change))
    assert "\n" not in str(caught.value) and "RECURRENT histories" in str(caught.value)
