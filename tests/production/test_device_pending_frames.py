"""A device-owned pending token served by the production runtime (CPU, fp32, Triton interpreted):
the executor keeps two rounds in flight where the specification allows it, the tokens equal the
sequential reference engine's over the host-fed core of the same checkpoint, and a request that needs
completion feedback (a string stop, a grammar) holds the runtime to one outstanding round."""

from __future__ import annotations

import dataclasses

import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.production.executor import FrameBusy, FrameOrderViolated
from helios.production.loading import runtime_for
from helios.production.native_model import LoadOptions, NativeModel
from helios.reference.engine import ReferenceEngine
from helios.runtime.events import Finished
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions
from helios.runtime.packing import LaneInput
from helios.runtime.request import GenerationRequest, SamplingParams
from helios.runtime.rounds import single_round
from tests.production.helpers import DEVICE, GPU, PAGES, TINY_OPTIONS
from tests.runtime.streams import serve_all

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
    return serve_all(runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=8))), requests)


def _prepared(i: int, request: GenerationRequest, **extra) -> PreparedRequest:
    return PreparedRequest(f"r{i}", request, observe_tokens=True, **extra)


def test_two_frames_are_in_flight_and_tokens_equal_the_reference(setup):
    model, expected = setup
    executor = model.executor
    assert executor.frames == 2
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

    def init(slot: int, sequence: int, frame: int):
        lanes = [LaneInput(slot=slot, generation=9, consumed=0, tokens=(), prompt_tokens_in_round=0, samples=False,
                           page_ids=(slot,), seed=0, sampling=sampling, output_limit=1, eos_ids=())]
        return single_round("initialization", 0, lanes, sequence=sequence, frame=frame)

    origin = executor.sequence
    with pytest.raises(FrameBusy, match="frame 2 outside"):
        executor.submit(init(0, origin + 1, 2))
    first = init(0, origin + 1, 0)
    executor.submit(first)
    with pytest.raises(FrameBusy, match="frame 0 still holds"):
        executor.submit(init(1, origin + 2, 0))
    second = init(1, origin + 2, 1)
    executor.submit(second)
    with pytest.raises(FrameBusy):
        executor.run_round("initialization", first.lanes)
    with pytest.raises(FrameOrderViolated, match="before an older round"):
        executor.collect(second)
    rows = [executor.collect(first), executor.collect(second)]
    assert [(r[0].frame_index, r[0].generation) for r in rows] == [(0, 9), (1, 9)]
    assert rows[1][0].submission_sequence == rows[0][0].submission_sequence + 1
    assert executor.outstanding == 0


def test_a_framed_round_is_traced_with_its_own_frame_record(setup):
    """The trace recorder records each round's rows as its frame's read-back holds them (a later
    submission has already rewritten the completion buffers), a failed status included, which the
    one validator then rejects."""
    from conformance.trace import TraceList, TraceRecorder
    from helios.proto import manifest_pb2
    from helios.runtime.completion import CompletionInvalid, validate_round

    model, _ = setup
    sink = TraceList()
    recorder = TraceRecorder(model.executor, model.serving, model.manifests[0], sink)
    origin = model.executor.sequence
    plans = []
    for frame, slot in ((0, 0), (1, 1)):
        lanes = [LaneInput(slot=slot, generation=4 + frame, consumed=0, tokens=(), prompt_tokens_in_round=0,
                           samples=False, page_ids=(slot,), seed=0, sampling=SamplingParams(), output_limit=1,
                           eos_ids=())]
        plans.append(single_round("initialization", 0, lanes, sequence=origin + 1 + frame, frame=frame))
        recorder.submit(plans[-1])
    model.executor.frame_readback[1][manifest_pb2.COMPLETION_FIELD_STATUS].fill_(3)  # an execution failure
    first, second = (recorder.collect(plan) for plan in plans)
    assert [record.frame for record in sink.records] == [0, 1]
    assert (first[0].status, first[0].frame_index, first[0].generation) == (0, 0, 4)
    assert (second[0].status, second[0].frame_index, second[0].generation) == (3, 1, 5)
    assert sink.records[1].rows == tuple(second) and sink.records[1].sequence == origin + 2
    with pytest.raises(CompletionInvalid, match="status 3"):
        validate_round("initialization", plans[1].lanes, second, sequence=plans[1].sequence,
                       sampled_tokens=model.contract.vocabulary.sampled_tokens,
                       page_tokens=model.contract.cache.page_tokens, frame=1)
    assert model.executor.outstanding == 0
