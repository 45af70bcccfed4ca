"""The hybrid family with recurrent state (LFM2) through the production executor on CPU (fp32, Triton
kernels interpreted, two rounds in flight) under the batching scheduler: the logits of every sampling
round equal transformers' within 1e-4 relative and 32 greedy tokens are equal; batched requests in
prefill, decode and mixed rounds give transformers' tokens; requests snapshotted at random endpoints
(mid-page and on page boundaries) resume with the uninterrupted reference run's tokens, their restored
state rows byte-equal."""

from __future__ import annotations

import random

import numpy as np
import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.recurrent.helpers import GREEDY, OPTIONS, PROMPT, PROMPTS, C, drive, state_planes


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("lfm2"), OPTIONS)


def production_runtime(core, *, pages: int, max_active: int = 4):
    from helios.production.loading import load_native_model, runtime_for
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    model = load_native_model(core, pages=pages, device="cpu")
    return runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=max_active, queue_capacity=8)))


def _logits_of(runtime, plan) -> dict[str, np.ndarray]:
    """Each sampling lane's logits row of the round just run (the plan's scratch, read before the
    next round reuses it)."""
    launch_plan = runtime.executor.graphs[plan.graph].plan
    name = next((launch.inputs[0] for launch in launch_plan.launches if launch.kernel in ("sample", "argmax")), None)
    if name is None:  # INITIALIZATION, RESTORATION: no logits
        return {}
    logits = launch_plan.scratch[name]
    return {request_id: logits[lane.slot].cpu().numpy().copy()
            for request_id, lane in zip(plan.request_ids, plan.lanes, strict=True) if lane.samples}


@pytest.mark.slow
def test_production_logits_and_greedy_tokens_match_transformers(core, hf_model):
    from tests.fixtures.hf_oracle import hf_greedy, hf_teacher_forced_logits

    runtime = production_runtime(core, pages=32)
    rows: list[np.ndarray] = []
    request = GenerationRequest(PROMPT, max_tokens=32, sampling=GREEDY, ignore_eos=True)
    tokens, _ = drive(runtime, {"r": request}, {}, lambda plane, row: None, [],
                      on_submit=lambda plan: rows.extend(_logits_of(runtime, plan).values()))
    assert tokens["r"] == hf_greedy(hf_model("lfm2"), list(PROMPT), 32)
    ours = np.stack(rows[:17])  # the prompt's last chunk + 16 decode steps
    reference = hf_teacher_forced_logits(hf_model("lfm2"), list(PROMPT), tokens["r"][:16])
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 1e-4, f"largest relative logit error {relative:.3g}"


@pytest.mark.slow
def test_production_batched_mixed_rounds_give_transformers_tokens(core, hf_model):
    from tests.fixtures.hf_oracle import hf_greedy

    runtime = production_runtime(core, pages=64)
    operations = []
    requests = {f"r{i}": GenerationRequest(p, max_tokens=10, sampling=GREEDY, ignore_eos=True)
                for i, p in enumerate(PROMPTS)}
    tokens, _ = drive(runtime, requests, {}, lambda plane, row: None, [],
                      on_submit=lambda plan: operations.append(plan.operation))
    for request_id, request in requests.items():
        assert tokens[request_id] == hf_greedy(hf_model("lfm2"), list(request.prompt_token_ids), 10), request_id
    assert C.OPERATION_MIXED in operations and C.OPERATION_DECODE in operations


@pytest.mark.slow
def test_production_resumes_snapshotted_recurrent_state_token_exactly(core):
    rng = random.Random(5)
    requests, preempt_at = {}, {}
    for i, length in enumerate((7, 5, 10)):
        sampling = GREEDY if i % 2 else SamplingParams(temperature=0.9, top_k=20, seed=rng.randrange(1000))
        prompt = tuple(rng.randrange(256) for _ in range(length))
        requests[f"r{i}"] = GenerationRequest(prompt, max_tokens=6, sampling=sampling, ignore_eos=True)
    # endpoints prompt + count - 1: 8 (a page boundary), 6 and 12 (a boundary) on 4-token pages
    preempt_at = {"r0": 2, "r1": 2, "r2": 3}
    reference = ReferenceEngine.load(core, pages=16)
    expected = {request_id: list(reference.generate(r)) for request_id, r in requests.items()}
    runtime = production_runtime(core, pages=32)
    buffers = runtime.executor.buffers
    planes = state_planes(core.contract)
    tokens, checked = drive(runtime, requests, preempt_at,
                            lambda plane, row: buffers[plane][row].cpu().numpy().copy(), planes)
    assert tokens == expected
    counters = runtime.scheduler.counters
    assert counters.snapshots_restored == 3 and checked == 3 * len(planes)
    assert counters.recomputed_tokens == 0
