"""The Engram test recipe's core through the production executor on CPU (fp32, Triton interpreted)
under the batching scheduler, two rounds in flight (docs/engram.md): it generates the reference
runtime's greedy tokens; while a round's completion is held back (not collected) its staging frame
is never written, a third round cannot be staged, and the next round takes the frame the collected
round retired; the staging stays two frames. The table's host frames are tensors of their own, copied
into the device frames at each fill, as on a GPU (`engram_gatherers(separate=True)`; helios conform
runs the CPU's shared staging: tests/conformance/test_engram_conformance.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.engine.config import SchedulerRequest
from helios.reference.engine import ReferenceEngine
from helios.runtime.engram import EngramFrameBusy
from helios.runtime.request import GenerationRequest, SamplingParams

GREEDY = SamplingParams(temperature=0.0)
PROMPTS = {"a": (5, 9, 17, 3, 44, 12, 7, 7, 9, 30, 2), "b": (61, 62, 63, 61, 62)}
MAX_TOKENS = 4


@pytest.mark.skipif(torch.cuda.is_available(), reason="an fp32 CPU test (interpreted kernels, device=\"cpu\"); "
                    "a GPU process defines compiled kernels, and conformance checks the operator on a GPU")
def test_production_serves_the_reference_tokens_and_never_overwrites_a_frame_in_use(engram_core):
    from helios.production.engram import engram_gatherers
    from helios.production.loading import load_native_model, runtime_for
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions

    core, _ = engram_core
    requests = {k: GenerationRequest(p, max_tokens=MAX_TOKENS, sampling=GREEDY, ignore_eos=True)
                for k, p in PROMPTS.items()}
    reference = ReferenceEngine.load(core, pages=16)
    expected = {k: list(reference.generate(r)) for k, r in requests.items()}

    model = load_native_model(core, pages=16, device="cpu")
    # the GPU's staging: host frames of their own, each fill copied into the device frame
    model.executor.engram = engram_gatherers(core, model.executor.buffers, separate=True, pinned=False)
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4)))
    scheduler, executor = runtime.scheduler, runtime.executor
    (gatherer,) = executor.engram
    staging = gatherer.staging  # the host frames, not the device buffer
    assert gatherer.upload is not None and not np.shares_memory(staging, executor.buffers["engram.staging"].numpy())
    fill = gatherer.fill
    overlapped = []  # (round staged, round holding the other frame) for fills made while a frame was held

    def guarded_fill(sequence, lanes):
        """Every fill leaves the frame another outstanding round holds byte for byte as it was."""
        others = [(f, held, staging[f].copy()) for f, held in enumerate(gatherer.held()) if held is not None]
        frame = fill(sequence, lanes)
        for f, held, before in others:
            assert f != frame and np.array_equal(staging[f], before), (sequence, held)
            overlapped.append((sequence, held))
        return frame

    gatherer.fill = guarded_fill
    for request_id, request in requests.items():
        scheduler.add(SchedulerRequest(request_id, request))
    tokens: dict[str, list[int]] = {request_id: [] for request_id in requests}
    held_back = False
    while not scheduler.idle:
        while (plan := scheduler.schedule()) is not None:
            executor.submit(plan)
            if not held_back and None not in gatherer.held():
                # Both frames are held: the older round's consumer is held back (not collected). A
                # third round cannot be staged, and nothing of either frame is written.
                held_back = True
                before = staging.copy()
                with pytest.raises(EngramFrameBusy, match="both staging frames are held"):
                    fill(plan.sequence + 1, plan.lanes)
                assert np.array_equal(staging, before)
        plan = scheduler.oldest()
        outcomes = scheduler.complete(plan, executor.collect(plan))
        for request_id, token in zip(outcomes.request_ids, outcomes.tokens, strict=True):
            tokens[request_id].append(token)
            if len(tokens[request_id]) == MAX_TOKENS:
                scheduler.finish(request_id)
    assert tokens == expected
    assert held_back and overlapped  # rounds were staged while the other frame was in use
    assert gatherer.staging is staging and staging.shape[0] == 2 and gatherer.held() == (None, None)
    assert core.contract.model.engram_tables[0].resource not in model.executor.buffers
    assert [p.name for p in model.startup][-1] == "engram"  # the phase of a core with tables
    # the device frames hold what the host frames staged (the last fill of each was copied)
    assert np.array_equal(executor.buffers["engram.staging"].numpy(), staging)


@pytest.mark.skipif(torch.cuda.is_available(), reason="an fp32 CPU test (interpreted kernels, device=\"cpu\"); "
                    "a GPU process defines compiled kernels, and conformance checks the operator on a GPU")
def test_production_ranks_each_stage_their_own_frames_and_generate_the_one_rank_tokens(engram_core,
                                                                                    tiny_checkpoint, tmp_path):
    """--tp 2 through production ranks (a spawned peer process): each rank's executor stages the plan's
    rounds into its own two frames and retires them at its own collection."""
    import asyncio
    import dataclasses

    from helios.ignition.preparation.engram import EngramOptions
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
    from tests.conftest import ENGRAM_CAPACITIES
    from tests.production.test_ranks import _production, _reference, _run

    core, _ = engram_core
    expected = _reference(core, prompt=PROMPTS["a"])
    two = prepare_checkpoint(tiny_checkpoint("llama"), dataclasses.replace(
        PreparationOptions(**ENGRAM_CAPACITIES, engram=EngramOptions(layer=1)), tensor_parallel=2))
    runtime, _ = _production(two, tmp_path)
    try:
        tokens, failed = asyncio.run(_run(runtime, "r", prompt=PROMPTS["a"]))
        assert failed is None and tokens == expected
        (gatherer,) = runtime.executor.local.engram
        assert gatherer.fills == 2 + 2 and gatherer.held() == (None, None)  # two prefill chunks, two decodes
    finally:
        runtime.shutdown()
    assert all(p.exitcode == 0 for p in runtime.executor.processes)
