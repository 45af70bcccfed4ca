"""A device-owned pending token (`PreparationOptions(pending_token="device")`) through the reference
engine: the STATE row persists across rounds, and tokens equal the host-fed core's token for token
(greedy and seeded, sequential and in MIXED rounds)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.proto import contract_pb2
from helios.reference.engine import ReferenceEngine
from helios.runtime.packing import LaneInput
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.reference.test_engine import greedy_lane

PROMPT = (3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46)
HOST = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8, 16),
                          pending_token="host")
DEVICE = dataclasses.replace(HOST, pending_token="device")


@pytest.fixture(scope="module", params=["qwen2", "llama"])
def cores(request, tiny_checkpoint):
    directory = tiny_checkpoint(request.param)
    return prepare_checkpoint(directory, HOST), prepare_checkpoint(directory, DEVICE)


@pytest.mark.parametrize("sampling", [SamplingParams(temperature=0.0),
                                      SamplingParams(temperature=1.0, top_k=20, seed=7),
                                      SamplingParams(temperature=0.8, top_p=0.9, repetition_penalty=1.2, seed=-3)])
def test_device_pending_tokens_equal_host_fed_tokens(cores, sampling):
    host, device = (ReferenceEngine.load(c) for c in cores)
    request = GenerationRequest(PROMPT, max_tokens=9, sampling=sampling, ignore_eos=True)
    expected = list(host.generate(request))
    assert list(device.generate(request)) == expected
    # the state row of slot 0 holds the last sampled token (written by the last DECODE round)
    assert int(device.buffers["pending_tokens"][0]) == expected[-1]
    assert "pending_tokens" not in host.buffers


def test_a_mixed_round_reads_the_decode_lane_from_state_and_prompt_rows_from_the_host(cores):
    """Lane A decodes (its token unknown to packing) while lane B prefills, in one MIXED round."""
    mixed = [g.name for g in cores[1].contract.model.graphs if g.operation == contract_pb2.OPERATION_MIXED][0]

    a_prompt, b_prompt = PROMPT[:6], PROMPT[4:]
    sampled = []
    for core in cores:
        engine = ReferenceEngine.load(core)
        (first,) = engine.run_round("prefill_p8", [greedy_lane(0, 0, a_prompt, 6, (0, 1))])
        # The device core is told a stale token: its pending row must come from the state, not the host.
        a_token = first.sampled_id if core is cores[0] else (first.sampled_id + 1) % 7
        rows = engine.run_round(mixed, [greedy_lane(0, 6, (a_token,), 0, (0, 1)),
                                        greedy_lane(1, 0, b_prompt, 7, (2, 3))])
        sampled.append([r.sampled_id for r in rows])
        if core is cores[1]:
            np.testing.assert_array_equal(engine.buffers["pending_tokens"], sampled[-1])
    assert sampled[0] == sampled[1]


def test_a_pending_row_never_reads_a_stale_prompt_row_of_an_earlier_round(cores):
    """Round 1 packs prompt rows 0..8 of a MIXED graph; round 2 puts a decode lane at row 0 of the
    same buffers: the host must leave that row at padding so the device reads the state's token."""
    mixed = [g.name for g in cores[1].contract.model.graphs if g.operation == contract_pb2.OPERATION_MIXED][0]
    greedy = SamplingParams(temperature=0.0)

    def lane(slot, consumed, tokens, prompt_in_round, samples, pages):
        return LaneInput(slot=slot, generation=1, consumed=consumed, tokens=tokens,
                         prompt_tokens_in_round=prompt_in_round, samples=samples, page_ids=pages, seed=0,
                         sampling=greedy, output_limit=4, eos_ids=())

    sampled = []
    for core in cores:
        engine = ReferenceEngine.load(core)
        (a,) = engine.run_round("prefill_p8", [lane(0, 0, PROMPT[:4], 4, True, (0, 1))])
        engine.run_round(mixed, [lane(1, 0, PROMPT[:9], 9, False, (2, 3, 4))])
        rows = engine.run_round(mixed, [lane(0, 4, (a.sampled_id,), 0, True, (0, 1)),
                                        lane(1, 9, PROMPT[9:], 2, True, (2, 3, 4))])
        sampled.append([a.sampled_id] + [r.sampled_id for r in rows])
    assert sampled[0] == sampled[1]


def test_the_batching_runtime_over_the_reference_engine_matches_sequential_tokens_under_preemption(cores):
    """BatchingRuntime driving the reference engine's unframed run_round over a device core: one
    frame, every round in frame 0; page pressure preempts and readmits (a readmitted request's
    device-owned token is re-fed by the host with its history); tokens equal the host-fed core's."""
    import asyncio

    from helios.engine.worker import BatchingRuntime
    from helios.runtime.events import Finished, TokenEvent
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.limits import AdmissionLimits

    host, device = cores
    requests = [GenerationRequest(PROMPT[i:], max_tokens=8, sampling=SamplingParams(temperature=0.0 if i % 2 else 0.9,
                                                                                    top_k=20, seed=i), ignore_eos=True)
                for i in range(3)]
    reference = ReferenceEngine.load(host)
    expected = [list(reference.generate(r)) for r in requests]
    pages = 7  # two requests growing to 19 and 18 positions (5 pages each) cannot both hold theirs
    engine = ReferenceEngine.load(device, pages=pages)
    runtime = BatchingRuntime.for_executor(engine.executor, engine.contract, AdmissionLimits(max_active=2, queue_capacity=8),
                                             pages=pages)

    async def main():
        runtime.start()
        try:
            streams = [runtime.submit(PreparedRequest(f"r{i}", r, observe_tokens=True))
                       for i, r in enumerate(requests)]
            out = []
            for stream in streams:
                tokens = []
                async for event in stream:
                    if isinstance(event, TokenEvent):
                        tokens.append(event.token_id)
                    else:
                        assert isinstance(event, Finished), event
                out.append(tokens)
            return out
        finally:
            runtime.shutdown()

    assert asyncio.run(main()) == expected
    counters = runtime.scheduler.counters
    assert counters.preemptions >= 1 and counters.readmissions >= 1
