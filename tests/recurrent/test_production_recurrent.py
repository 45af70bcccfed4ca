"""The hybrid family with recurrent state (LFM2) through the production executor on CPU (fp32, Triton
kernels interpreted, two rounds in flight) under the batching scheduler: the logits of every sampling
round equal transformers' within 1e-4 relative and 32 greedy tokens are equal; requests snapshotted
at chosen endpoints (mid-page and on page boundaries) resume with the uninterrupted reference run's
tokens, their restored state rows byte-equal. (Batched requests in prefill, decode and mixed rounds
through the production executor are compared with the reference by `helios conform`:
tests/conformance/test_recurrent_conformance.py.)"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.recurrent.helpers import GREEDY, OPTIONS, PROMPT, drive, state_planes

# fewer graphs than the reference tests' core (the interpreter lowers each): batches of 1 and 2, chunks
# of 8 (the 20-token prompt is prefilled in three rounds)
PRODUCTION = replace(OPTIONS, batch_capacities=(1, 2), prefill_capacities=(8,))


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("lfm2"), PRODUCTION)


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
    # rows are slots in a graph of one lane a slot, else submission rows (docs/ignition.md)
    slots = max(graph.batch_capacity for graph in runtime.executor.graphs.values())
    return {request_id: logits[lane.slot if logits.shape[0] == slots else index].cpu().numpy().copy()
            for index, (request_id, lane) in enumerate(zip(plan.request_ids, plan.lanes, strict=True))
            if lane.samples}


@pytest.mark.slow
def test_production_logits_and_greedy_tokens_match_transformers(core, hf_model):
    from tests.fixtures.hf_oracle import hf_greedy, hf_teacher_forced_logits

    runtime = production_runtime(core, pages=32, max_active=2)
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
def test_production_resumes_snapshotted_recurrent_state_token_exactly(core):
    rng = random.Random(5)
    requests, preempt_at = {}, {}
    for i, length in enumerate((7, 5, 10)):  # a third request waits for a slot
        sampling = GREEDY if i % 2 else SamplingParams(temperature=0.9, top_k=20, seed=rng.randrange(1000))
        prompt = tuple(rng.randrange(256) for _ in range(length))
        requests[f"r{i}"] = GenerationRequest(prompt, max_tokens=6, sampling=sampling, ignore_eos=True)
    # endpoints prompt + count - 1: 8 (a page boundary), 6 and 12 (a boundary) on 4-token pages
    preempt_at = {"r0": 2, "r1": 2, "r2": 3}
    reference = ReferenceEngine.load(core, pages=16)
    expected = {request_id: list(reference.generate(r)) for request_id, r in requests.items()}
    runtime = production_runtime(core, pages=32, max_active=2)
    buffers = runtime.executor.buffers
    planes = state_planes(core.contract)
    tokens, checked = drive(runtime, requests, preempt_at,
                            lambda plane, row: buffers[plane][row].cpu().numpy().copy(), planes)
    assert tokens == expected
    counters = runtime.scheduler.counters
    assert counters.snapshots_restored == 3 and checked == 3 * len(planes)
    assert counters.recomputed_tokens == 0
