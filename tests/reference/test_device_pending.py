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

PROMPT = (3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46)
HOST = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8, 16))
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
    greedy = SamplingParams(temperature=0.0)

    def lane(slot, consumed, tokens, prompt_in_round, pages):
        return LaneInput(slot=slot, generation=1, consumed=consumed, tokens=tokens,
                         prompt_tokens_in_round=prompt_in_round, samples=True, page_ids=pages, seed=0,
                         sampling=greedy, output_limit=4, eos_ids=())

    a_prompt, b_prompt = PROMPT[:6], PROMPT[4:]
    sampled = []
    for core in cores:
        engine = ReferenceEngine.load(core)
        (first,) = engine.run_round("prefill_p8", [lane(0, 0, a_prompt, 6, (0, 1))])
        # The device core is told a stale token: its pending row must come from the state, not the host.
        a_token = first.sampled_id if core is cores[0] else (first.sampled_id + 1) % 7
        rows = engine.run_round(mixed, [lane(0, 6, (a_token,), 0, (0, 1)), lane(1, 0, b_prompt, 7, (2, 3))])
        sampled.append([r.sampled_id for r in rows])
        if core is cores[1]:
            np.testing.assert_array_equal(engine.buffers["pending_tokens"], sampled[-1])
    assert sampled[0] == sampled[1]
