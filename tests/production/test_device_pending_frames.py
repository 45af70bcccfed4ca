"""A device-owned pending token served by the production runtime (CPU, fp32, Triton interpreted):
`FramedExecutor` keeps two rounds in flight where the specification allows it, the tokens equal the
sequential reference engine's over the host-fed core of the same checkpoint, and a request that needs
completion feedback (a string stop, a grammar) holds the runtime to one outstanding round."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.production.frames import FrameBusy, FramedExecutor, FrameOrderViolated
from helios.production.native_model import LoadOptions, NativeModel
from helios.production.runtime import ProductionRuntime
from helios.reference.engine import ReferenceEngine
from helios.runtime.events import Finished, TokenEvent
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.packing import LaneInput
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.production.helpers import DEVICE, GPU, PAGES, TINY_OPTIONS

pytestmark = pytest.mark.skipif(GPU, reason="fp32 token equality is a CPU test; the GPU runs bf16")

DEVICE_OPTIONS = dataclasses.replace(TINY_OPTIONS, pending_token="device")
HOST_OPTIONS = dataclasses.replace(TINY_OPTIONS, pending_token="host")
REQUESTS = (  # prompts of 5 to 19 tokens: chunked prefill, MIXED rounds, decode rounds
    GenerationRequest((5, 17, 99, 200, 33, 1, 2, 3, 4, 5, 6, 7, 81, 82, 83, 120, 121, 9, 250), max_tokens=5,
                      sampling=SamplingParams(temperature=0.0), ignore_eos=True),
    GenerationRequest((40, 41, 42, 43, 44), max_tokens=6, sampling=SamplingParams(temperature=0.9, top_k=20, seed=3),
                      ignore_eos=True),
    GenerationRequest((7, 8, 9, 10, 11, 12, 13, 14, 15), max_tokens=3,
                      sampling=SamplingParams(temperature=0.0), ignore_eos=True),
)


class EvenTokens:
    """A grammar (GrammarMatcher) allowing only even token ids."""

    def __init__(self, mask_words: int) -> None:
        self.words = [0x55555555] * mask_words  # bits 0, 2, 4, ...: even ids

    def mask(self):
        return self.words

    def advance(self, token: int) -> None:
        if token % 2:
            raise ValueError(f"token {token} is odd")


@pytest.fixture(scope="module")
def setup(tiny_checkpoint):
    directory = tiny_checkpoint("qwen3")
    host = prepare_checkpoint(directory, HOST_OPTIONS)
    reference = ReferenceEngine.load(host, pages=PAGES)
    expected = [list(reference.generate(r)) for r in REQUESTS]
    model = NativeModel.load(prepare_checkpoint(directory, DEVICE_OPTIONS), LoadOptions(device=str(DEVICE), pages=PAGES))
    return model, expected


def serve(model, requests: list[PreparedRequest]) -> list[tuple[list[int], object]]:
    runtime = ProductionRuntime.for_native_model(model, AdmissionLimits(max_active=2, queue_capacity=8))

    async def collect(stream):
        tokens = []
        async for event in stream:
            if isinstance(event, TokenEvent):
                tokens.append(event.token_id)
            else:
                return tokens, event
        raise AssertionError("no terminal event")

    async def main():
        runtime.start()
        try:
            streams = [runtime.submit(r) for r in requests]
            return [await collect(s) for s in streams]
        finally:
            runtime.shutdown()

    return asyncio.run(main())


def _prepared(i: int, request: GenerationRequest, **extra) -> PreparedRequest:
    return PreparedRequest(f"r{i}", request, observe_tokens=True, **extra)


def test_two_frames_are_in_flight_and_tokens_equal_the_reference(setup):
    model, expected = setup
    executor = model.executor
    assert isinstance(executor, FramedExecutor)
    executor.peak_outstanding = executor.submissions_while_outstanding = 0
    results = serve(model, [_prepared(i, r) for i, r in enumerate(REQUESTS)])
    assert [tokens for tokens, _ in results] == expected
    assert all(isinstance(end, Finished) for _, end in results)
    assert executor.peak_outstanding == 2 and executor.submissions_while_outstanding > 0
    assert executor.outstanding == 0


@pytest.mark.parametrize("feedback", ["host_stop", "grammar"])
def test_a_request_needing_feedback_holds_the_runtime_to_one_frame(setup, feedback):
    model, expected = setup
    executor = model.executor
    executor.peak_outstanding = executor.submissions_while_outstanding = 0
    extra = {"host_stop": True} if feedback == "host_stop" else {
        "grammar": EvenTokens(model.contract.vocabulary.mask_words)}
    requests = [_prepared(0, REQUESTS[1], **extra), _prepared(1, REQUESTS[2])]
    results = serve(model, requests)
    assert all(isinstance(end, Finished) for _, end in results)
    assert executor.peak_outstanding == 1 and executor.submissions_while_outstanding == 0
    if feedback == "grammar":
        assert len(results[0][0]) == 6 and all(t % 2 == 0 for t in results[0][0])
    else:
        assert results[0][0] == expected[1]  # no output filter: nothing stops it early
    assert results[1][0] == expected[2]


def test_frames_are_collected_in_order_and_never_reused_while_outstanding(setup):
    model, _ = setup
    executor = model.executor
    sampling = SamplingParams(temperature=0.0)

    def init(slot: int) -> list[LaneInput]:
        return [LaneInput(slot=slot, generation=9, consumed=0, tokens=(), prompt_tokens_in_round=0, samples=False,
                          page_ids=(slot,), seed=0, sampling=sampling, output_limit=1, eos_ids=())]

    with pytest.raises(FrameBusy, match="frame 2 outside"):
        executor.submit_round("initialization", init(0), 2)
    first = executor.submit_round("initialization", init(0), 0)
    with pytest.raises(FrameBusy, match="frame 0 still holds"):
        executor.submit_round("initialization", init(1), 0)
    second = executor.submit_round("initialization", init(1), 1)
    with pytest.raises(FrameBusy):
        executor.run_round("initialization", init(1))
    with pytest.raises(FrameOrderViolated, match="out of submission order"):
        executor.collect(second)
    rows = [executor.collect(first), executor.collect(second)]
    assert [(r[0].frame_index, r[0].generation) for r in rows] == [(0, 9), (1, 9)]
    assert rows[1][0].submission_sequence == rows[0][0].submission_sequence + 1
    assert executor.outstanding == 0


def test_a_rejected_framed_round_is_traced_with_its_own_frame_record(setup):
    """The trace recorder reads a rejected round's rows from its frame's read-back (a later
    submission may already have rewritten the completion buffers)."""
    from conformance.trace import FramedTraceRecorder, TraceList
    from helios.proto import manifest_pb2
    from helios.runtime.completion import CompletionInvalid

    model, _ = setup
    sink = TraceList()
    recorder = FramedTraceRecorder(model.executor, model.serving, model.manifests[0], sink)
    lanes = [LaneInput(slot=1, generation=4, consumed=0, tokens=(), prompt_tokens_in_round=0, samples=False,
                       page_ids=(1,), seed=0, sampling=SamplingParams(), output_limit=1, eos_ids=())]
    handle = recorder.submit_round("initialization", lanes, 1)
    model.executor.frame_readback[1][manifest_pb2.COMPLETION_FIELD_STATUS].fill_(3)  # an execution failure
    with pytest.raises(CompletionInvalid, match="status 3"):
        recorder.collect(handle)
    (record,) = sink.records
    assert record.frame == 1 and record.error is not None
    assert (record.rows[0].status, record.rows[0].frame_index, record.rows[0].generation) == (3, 1, 4)
    assert model.executor.outstanding == 0
