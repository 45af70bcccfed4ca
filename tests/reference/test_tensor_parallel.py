"""The reference runtime runs a tensor-parallel core's ranks in lockstep in one process: a tiny core
of every family prepared with --tp 2 and --tp 4 generates the --tp 1 core's tokens (fp32), greedy
and seeded, and a rank whose completion differs from rank 0's fails the round."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helios.engine.oneshot import GenerationFailed, generate_tokens
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.proto import manifest_pb2 as M
from helios.reference import load_runtime
from helios.reference.executor import ReferenceExecutor
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.fixtures.checkpoints import FAMILIES

OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8,),
                             context_tokens=48)
# 19 prompt tokens: three prefill chunks of 8, pages of 4, and (Mistral) past the sliding window.
PROMPT = (5, 17, 99, 3, 200, 41, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19)
REQUESTS = (SamplingParams(temperature=0.0), SamplingParams(temperature=0.9, top_k=40, seed=7))  # greedy, seeded


def _tokens(core, sampling: SamplingParams) -> list[int]:
    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4)))
    return generate_tokens(runtime, GenerationRequest(PROMPT, max_tokens=8, sampling=sampling))


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_generates_the_one_rank_tokens_on_two_and_four_ranks(tiny_checkpoint, family):
    directory = tiny_checkpoint(family)
    one = prepare_checkpoint(directory, OPTIONS)
    expected = [_tokens(one, sampling) for sampling in REQUESTS]
    assert len(expected[0]) == 8
    for ranks in (2, 4):  # 4 query heads and 2 kv heads: split at 2, replicated at 4
        core = prepare_checkpoint(directory, dataclasses.replace(OPTIONS, tensor_parallel=ranks))
        assert [_tokens(core, sampling) for sampling in REQUESTS] == expected, (family, ranks)


def test_row_parallel_biases_count_once(tmp_path_factory):
    from tests.fixtures.checkpoints import make_checkpoint

    directory = make_checkpoint("llama", tmp_path_factory.mktemp("tp-bias") / "tiny-llama-biased",
                                overrides={"attention_bias": True, "mlp_bias": True})
    one = prepare_checkpoint(directory, OPTIONS)
    two = prepare_checkpoint(directory, dataclasses.replace(OPTIONS, tensor_parallel=2))
    assert _tokens(two, REQUESTS[0]) == _tokens(one, REQUESTS[0])


def test_each_rank_keeps_its_own_cache_and_a_disagreeing_rank_fails_the_round(tiny_checkpoint):
    core = prepare_checkpoint(tiny_checkpoint("qwen3"), dataclasses.replace(OPTIONS, tensor_parallel=2))
    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4)))
    executor: ReferenceExecutor = runtime._engine.executor
    zero, one = executor.rank_buffers
    assert zero["layer0.key"] is not one["layer0.key"]  # each rank's own kv head
    assert zero["lane_generation"] is one["lane_generation"]  # one transport, read by every rank
    assert len(generate_tokens(runtime, GenerationRequest(PROMPT, max_tokens=2, sampling=REQUESTS[0]))) == 2
    assert np.any(zero["layer0.key"] != one["layer0.key"])  # the prefill wrote each rank's own head

    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4)))
    executor = runtime._engine.executor
    one = executor.rank_buffers[1]
    emitted = executor.completion[M.COMPLETION_FIELD_EMITTED]
    agree = executor._check_agreement

    def rank_one_disagrees(plan):  # a fault of rank 1's program: its record is not rank 0's
        one[emitted][...] += 1
        agree(plan)

    executor._check_agreement = rank_one_disagrees
    with pytest.raises(GenerationFailed, match="rank 1's completion field COMPLETION_FIELD_EMITTED differs"):
        generate_tokens(runtime, GenerationRequest(PROMPT, max_tokens=2, sampling=REQUESTS[0]))
