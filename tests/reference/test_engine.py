"""The sequential reference engine: admission, stopping, cancellation, completion validation, and
MIXED rounds (a prefill chunk and a decode row in one program) agreeing with sequential rounds."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.proto import contract_pb2
from helios.reference.engine import AdmissionRejected, CompletionInvalid, ReferenceEngine
from helios.runtime.packing import LaneInput
from helios.runtime.request import GenerationRequest, SamplingParams

PROMPT = (3, 14, 15, 92, 65, 35, 89, 79, 32, 38, 46)
OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2), prefill_capacities=(8, 16))


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen2"), OPTIONS)


def _request(max_tokens=6, **sampling):
    return GenerationRequest(PROMPT, max_tokens=max_tokens, sampling=SamplingParams(**sampling), ignore_eos=True)


def test_stops_at_max_tokens_and_returns_every_page(core):
    engine = ReferenceEngine.load(core)
    tokens = list(engine.generate(_request(max_tokens=5, temperature=0.0)))
    assert len(tokens) == 5
    assert engine.allocator.free == engine.allocator.pages


def test_stops_after_an_eos_id_which_is_yielded(core):
    engine = ReferenceEngine.load(core)
    greedy = list(engine.generate(_request(max_tokens=6, temperature=0.0)))
    eos = greedy[2]
    request = GenerationRequest(PROMPT, max_tokens=6, sampling=SamplingParams(temperature=0.0), eos_token_ids=(eos,))
    assert list(engine.generate(request)) == greedy[: greedy.index(eos) + 1]


def test_closing_the_generator_cancels_and_frees_pages(core):
    engine = ReferenceEngine.load(core)
    stream = engine.generate(_request(max_tokens=20, temperature=0.0))
    next(stream)
    assert engine.allocator.free < engine.allocator.pages
    stream.close()
    assert engine.allocator.free == engine.allocator.pages


def test_requests_in_distinct_slots_interleave(core):
    engine = ReferenceEngine.load(core, pages=16)
    alone = [list(engine.generate(_request(max_tokens=4, temperature=1.0, seed=s))) for s in (1, 2)]
    first = engine.generate(_request(max_tokens=4, temperature=1.0, seed=1), slot=0)
    second = engine.generate(_request(max_tokens=4, temperature=1.0, seed=2), slot=1)
    with pytest.raises(AdmissionRejected, match="slot 0 already holds"):
        engine.generate(_request(max_tokens=4), slot=0)
    interleaved = [[], []]
    for a, b in zip(first, second, strict=True):
        interleaved[0].append(a)
        interleaved[1].append(b)
    assert interleaved == alone
    assert engine.allocator.free == engine.allocator.pages


def test_admission_reserves_pages_and_a_dropped_stream_returns_them(core):
    engine = ReferenceEngine.load(core, pages=6)  # 11 prompt + 12 output tokens = 6 pages of 4
    stream = engine.generate(_request(max_tokens=12, temperature=0.0))
    assert engine.allocator.free == 0
    with pytest.raises(AdmissionRejected, match="pages"):
        engine.generate(_request(max_tokens=1), slot=1)
    del stream  # never started
    assert engine.allocator.free == 6


def test_seeded_sampling_reproduces_and_depends_on_the_seed(core):
    engine = ReferenceEngine.load(core)
    first = list(engine.generate(_request(max_tokens=8, temperature=1.5, seed=7)))
    again = list(engine.generate(_request(max_tokens=8, temperature=1.5, seed=7)))
    other = list(engine.generate(_request(max_tokens=8, temperature=1.5, seed=8)))
    assert first == again
    assert first != other


def test_admission_rejects_ids_outside_the_input_vocabulary(core):
    engine = ReferenceEngine.load(core)
    limit = core.contract.model.input_vocabulary.input_tokens
    with pytest.raises(AdmissionRejected, match="input vocabulary"):
        engine.generate(GenerationRequest((1, limit), max_tokens=1))


def test_a_completion_that_disagrees_with_its_round_is_rejected(core):
    engine = ReferenceEngine.load(core)
    lane = LaneInput(slot=0, generation=3, consumed=0, tokens=(), prompt_tokens_in_round=0, samples=False,
                     page_ids=(), seed=0, sampling=SamplingParams(), output_limit=1, eos_ids=())
    (row,) = engine.run_round("initialization", [lane])  # echoes generation 3, validated
    assert (row.generation, row.emitted, row.consumed_endpoint, row.draft_cursor, row.model_reserved) == (3, 0, 0, -1, -1)
    with pytest.raises(CompletionInvalid, match="generation echo"):
        engine.validate_round("initialization", [dataclasses.replace(lane, generation=4)], [row])
    with pytest.raises(CompletionInvalid, match="model_reserved"):
        engine.validate_round("initialization", [lane], [dataclasses.replace(row, model_reserved=0)])
    with pytest.raises(CompletionInvalid, match="consumed_endpoint"):
        engine.validate_round("initialization", [lane], [dataclasses.replace(row, consumed_endpoint=1)])
    with pytest.raises(CompletionInvalid, match="submission"):
        engine.validate_round("initialization", [lane], [dataclasses.replace(row, submission_sequence=0)])


def greedy_lane(slot: int, consumed: int, tokens: tuple[int, ...], prompt_in_round: int,
                pages: tuple[int, ...]) -> LaneInput:
    """A greedy lane of generation 1 that samples this round (the MIXED-round tests' lanes)."""
    return LaneInput(slot=slot, generation=1, consumed=consumed, tokens=tokens,
                     prompt_tokens_in_round=prompt_in_round, samples=True, page_ids=pages, seed=0,
                     sampling=SamplingParams(temperature=0.0), output_limit=4, eos_ids=())


def test_mixed_round_equals_separate_prefill_and_decode(core):
    """Lane A (slot 0) decodes while lane B (slot 1) prefills, in one MIXED program; each lane's
    logits equal those of running it alone."""
    mixed = [g.name for g in core.contract.model.graphs if g.operation == contract_pb2.OPERATION_MIXED]
    assert mixed, "the recipe declares MIXED graphs"

    a_prompt, b_prompt = PROMPT[:6], PROMPT[4:]
    alone = ReferenceEngine.load(core, keep=("logits",))
    (a_first,) = alone.run_round("prefill_p8", [greedy_lane(0, 0, a_prompt, 6, (0, 1))])
    alone.run_round("decode_b1", [greedy_lane(0, 6, (a_first.sampled_id,), 0, (0, 1))])
    a_decode_logits = alone.kept[-1]["logits"][0]
    alone.run_round("prefill_p8", [greedy_lane(1, 0, b_prompt, 7, (2, 3))])
    b_prefill_logits = alone.kept[-1]["logits"][0]  # a one-lane graph keeps its submission row

    together = ReferenceEngine.load(core, keep=("logits",))
    together.run_round("prefill_p8", [greedy_lane(0, 0, a_prompt, 6, (0, 1))])
    together.run_round(mixed[0], [greedy_lane(0, 6, (a_first.sampled_id,), 0, (0, 1)),
                                  greedy_lane(1, 0, b_prompt, 7, (2, 3))])
    logits = together.kept[-1]["logits"]
    np.testing.assert_allclose(logits[0], a_decode_logits, rtol=0, atol=1e-5)
    np.testing.assert_allclose(logits[1], b_prefill_logits, rtol=0, atol=1e-5)


def test_bf16_core_stays_close_to_transformers(tiny_checkpoint, hf_model):
    """bf16 weights and cache (upcast on load, rounded on every store) track the fp32 oracle loosely."""
    from tests.fixtures.hf_oracle import hf_teacher_forced_logits

    options = PreparationOptions(dtype="bf16", page_tokens=4, batch_capacities=(1,), prefill_capacities=(16,))
    engine = ReferenceEngine.load(prepare_checkpoint(tiny_checkpoint("llama"), options), keep=("logits",))
    tokens = list(engine.generate(_request(max_tokens=4, temperature=0.0)))
    ours = np.stack([kept["logits"][0] for kept in engine.kept[1:]])
    reference = hf_teacher_forced_logits(hf_model("llama"), list(PROMPT), tokens[:3])
    relative = np.abs(ours - reference).max() / np.abs(reference).max()
    assert relative < 0.05, relative
