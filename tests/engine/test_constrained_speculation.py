"""Grammar-constrained requests under speculation (reference executor, fp32, CPU): with history
drafting, a json_schema answer, a forced tool call (tool_choice "required") and reasoning whose close
delimiter lands inside a proposed run give, greedy, exactly the tokens they give without speculation,
in the reference runtime (the sequential `ReferenceEngine`) and under the batching scheduler, where
constrained lanes share SPECULATIVE rounds with each other and with an unconstrained lane. Every
constrained lane verifies only the copied proposals its grammar allows (limit <= copied + 1), each
target row under its position's mask; the cases are in constrained_cases.py. Host-only scheduler tests
with a hand-built catalog: a forbidden copied proposal cuts the run; without per-position masks
(graphs that do not take them, or no history drafting) a constrained lane decodes plainly."""

from __future__ import annotations

import json

import pytest

from helios.engine.catalog import GraphCatalog, GraphVariant
from helios.engine.config import SchedulerConfig, SchedulerRequest
from helios.engine.page_cache import PageCache
from helios.engine.scheduler import Scheduler
from helios.engine.sequential import SequentialRuntime
from helios.engine.worker import BatchingRuntime
from helios.proto import contract_pb2 as C
from helios.reference.engine import AdmissionRejected, ReferenceEngine
from helios.runtime.events import Finished
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.proposal_masks import allows
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.engine.constrained_cases import constrained_core, document, prepared, preparer, tool_checkpoint
from tests.engine.test_scheduler import run
from tests.runtime.streams import serve_all

NAMES = ("json", "tool", "reasoning")


@pytest.fixture(scope="module")
def served(tiny_checkpoint, tiny_draft, tmp_path_factory):
    checkpoint = tool_checkpoint(tiny_checkpoint("qwen3"), tmp_path_factory.mktemp("tools") / "tiny-qwen3-tools")
    core = constrained_core(checkpoint, tiny_draft("qwen3", "small"))
    frontend = preparer(core)
    plain, _, _ = _sequential(core, frontend, speculative=False)
    return core, frontend, plain


def _sequential(core, frontend, *, speculative: bool):
    """Each request through the reference runtime alone: its tokens and terminal event, every round's
    lanes and rows, and the engine."""
    engine = ReferenceEngine.load(core, speculative_width=4 if speculative else None, history_drafting=speculative)
    rounds = []
    run_round = engine.run_round

    def recorded(graph, lanes, **timing):
        rows = run_round(graph, lanes, **timing)
        rounds.append((lanes, rows))
        return rows

    engine.run_round = recorded
    contract = core.contract
    runtime = SequentialRuntime(engine, AdmissionLimits(max_active=1, queue_capacity=4),
                                context_tokens=contract.context_tokens,
                                vocab_size=contract.model.vocabulary.sampled_tokens, rejections=(AdmissionRejected,))
    results = serve_all(runtime, [prepared(frontend, name).runtime_request for name in NAMES])
    return dict(zip(NAMES, results, strict=True)), rounds, engine


def _constrained_lanes(rounds):
    """(lane, row) of every speculative lane carrying per-position grammar masks."""
    return [(lane, row) for lanes, rows in rounds for lane, row in zip(lanes, rows, strict=True)
            if lane.candidate_masks is not None]


def _check_lanes(pairs, close: int) -> None:
    """Each constrained lane: its limit within its masks, its copied run allowed position by position,
    its lane mask free; and one lane whose accepted run crosses the reasoning close delimiter, the
    masks changing right after it."""
    crossed = False
    for lane, row in pairs:
        masks = lane.candidate_masks
        assert len(masks) == len(lane.copied) + 1 and 1 <= lane.speculative_limit <= len(masks)
        assert lane.grammar_mask is None
        assert all(allows(masks[k], token) for k, token in enumerate(lane.copied))
        assert all(allows(masks[k], token) for k, token in enumerate(row.tokens()))  # emitted under its mask
        if close in lane.copied and row.accepted_drafts > lane.copied.index(close):
            at = lane.copied.index(close)
            crossed = crossed or masks[at] != masks[at + 1]
    assert crossed, "no proposed run carried the reasoning close delimiter through verification"


def test_the_reference_runtime_speculates_constrained_requests_losslessly(served):
    core, frontend, plain = served
    results, rounds, engine = _sequential(core, frontend, speculative=True)
    for name in NAMES:
        assert results[name][0] == plain[name][0], (name, document(frontend, results[name][0]))
        assert isinstance(results[name][1], Finished)
    answer = json.loads(document(frontend, plain["json"][0]).removesuffix("<|im_end|>"))
    assert set(answer) == {"ok", "n"}
    assert document(frontend, plain["tool"][0]).startswith("<tool_call>")
    assert "</think>" in document(frontend, plain["reasoning"][0])
    counts = engine.speculative_counts
    assert 0 < counts["copied_accepted"] <= counts["copied_offered"] == counts["offered"]  # no learned position
    _check_lanes(_constrained_lanes(rounds), frontend.bootstrap.tokenizer.token_to_id("</think>"))


class _Recording:
    """The executor seam, each collected round kept with its rows."""

    def __init__(self, executor) -> None:
        self.executor = executor
        self.frames = executor.frames
        self.rounds: list = []

    def submit(self, plan) -> None:
        self.executor.submit(plan)

    def collect(self, plan):
        rows = self.executor.collect(plan)
        self.rounds.append((plan.lanes, rows))
        return rows


def test_the_batching_scheduler_speculates_constrained_lanes_together(served):
    """The three constrained requests and an unconstrained one at once: constrained lanes share
    SPECULATIVE rounds, one outstanding round while they run, every token the plain one."""
    core, frontend, plain = served
    engine = ReferenceEngine.load(core, pages=256)
    executor = _Recording(engine.executor)
    runtime = BatchingRuntime.for_executor(executor, engine.contract, AdmissionLimits(max_active=4, queue_capacity=8),
                                           pages=256, speculative_width=4, history_drafting=True)
    free = GenerationRequest(tuple(range(40, 52)) * 2, max_tokens=12, sampling=SamplingParams(temperature=0.0),
                             ignore_eos=True)
    expected_free = list(ReferenceEngine.load(core).generate(free))
    requests = [prepared(frontend, name, f"b-{name}").runtime_request for name in NAMES]
    results = serve_all(runtime, [*requests, PreparedRequest("free", free, observe_tokens=True)])
    for name, (tokens, terminal) in zip(NAMES, results, strict=False):
        assert tokens == plain[name][0], (name, document(frontend, tokens))
        assert isinstance(terminal, Finished)
    assert results[-1][0] == expected_free
    pairs = _constrained_lanes(executor.rounds)
    _check_lanes(pairs, frontend.bootstrap.tokenizer.token_to_id("</think>"))
    shared = [lanes for lanes, _ in executor.rounds if sum(lane.candidate_masks is not None for lane in lanes) > 1]
    assert shared, "constrained lanes never shared a speculative round"
    counters = runtime.scheduler.counters
    assert counters.constrained_max_inflight == 1
    assert 0 < counters.copied_accepted <= counters.copied_offered


class _Forbidding:
    """A grammar (the GrammarMatcher protocol) that forbids one id everywhere; counts its advances."""

    def __init__(self, forbidden: int, words: int = 10) -> None:
        self.forbidden, self.words, self.advanced = forbidden, words, 0

    def mask(self):
        words = [-1] * self.words
        words[self.forbidden // 32] &= ~(1 << (self.forbidden % 32))
        return tuple(w if w < 2**31 else w - 2**32 for w in words)

    def advance(self, token: int) -> None:
        assert token != self.forbidden
        self.advanced += 1

    def fork(self):
        return _Forbidding(self.forbidden, self.words)


def _scheduler(*, grammar_masks: bool, history_drafting: bool = True):
    variants = [GraphVariant("initialization", C.OPERATION_INITIALIZATION, 1, 1, False),
                GraphVariant("prefill_p16", C.OPERATION_PREFILL, 1, 16, False),
                GraphVariant("decode_b1", C.OPERATION_DECODE, 1, 1, False),
                GraphVariant("speculative_b1_w4", C.OPERATION_SPECULATIVE, 1, 4, False, width=4, drafts=3,
                             lane_limit=4, grammar_masks=grammar_masks)]
    config = SchedulerConfig(max_active=2, queue_capacity=4, page_tokens=4, context_tokens=64, input_tokens=300,
                             sampled_tokens=300, eos_ids=(299,), speculative_width=4, history_drafting=history_drafting)
    return Scheduler(config, GraphCatalog(variants), PageCache(32, 4, "test"))


def _after_prefill(s, grammar):
    """Admit a constrained request whose prompt repeats (1 2 3 4), prefill it, its first token 3: its
    history proposes 4 1 2 (what followed its latest earlier 1 2 3)."""
    s.add(SchedulerRequest("c", GenerationRequest((1, 2, 3, 4, 1, 2, 3, 4, 1, 2), max_tokens=8),
                           constrained=True, grammar=grammar))
    run(s, s.schedule())  # initialization
    run(s, s.schedule(), token=3)  # prefill: the first sampled token
    return s.schedule()


def test_a_forbidden_copied_proposal_cuts_the_constrained_lanes_run():
    grammar = _Forbidding(forbidden=2)
    plan = _after_prefill(_scheduler(grammar_masks=True), grammar)
    assert plan.operation == C.OPERATION_SPECULATIVE and plan.constrained_lanes == 1
    (lane,) = plan.lanes
    assert lane.copied == (4, 1)  # 2 is forbidden at its position: the run ends before it
    assert lane.speculative_limit == 3 and len(lane.candidate_masks) == 3  # copied + 1 rows, each with a mask
    assert all(mask == grammar.mask() for mask in lane.candidate_masks) and lane.grammar_mask is None
    assert grammar.advanced == 0  # the masks came from a fork: the request's grammar did not move


@pytest.mark.parametrize(("grammar_masks", "history_drafting"), [(False, True), (True, False)],
                         ids=["graphs-without-masks", "no-history-drafting"])
def test_a_constrained_lane_decodes_plainly_without_per_position_masks(grammar_masks, history_drafting):
    grammar = _Forbidding(forbidden=2)
    plan = _after_prefill(_scheduler(grammar_masks=grammar_masks, history_drafting=history_drafting), grammar)
    assert plan.operation == C.OPERATION_DECODE
    (lane,) = plan.lanes
    assert lane.grammar_mask == grammar.mask() and lane.candidate_masks is None and lane.copied == ()


def test_adaptive_program_choice_keeps_constrained_requests_lossless(served):
    """Under adaptive choice (each round's program from measured costs: any width, or plain decoding)
    the constrained requests still give the plain tokens, in both engines."""
    core, frontend, plain = served
    engine = ReferenceEngine.load(core, speculative_width=4, history_drafting=True, adaptive_speculation=True)
    contract = core.contract
    sequential = SequentialRuntime(engine, AdmissionLimits(max_active=1, queue_capacity=4),
                                   context_tokens=contract.context_tokens,
                                   vocab_size=contract.model.vocabulary.sampled_tokens, rejections=(AdmissionRejected,))
    results = serve_all(sequential, [prepared(frontend, name, f"a-{name}").runtime_request for name in NAMES])
    assert [tokens for tokens, _ in results] == [plain[name][0] for name in NAMES]
    executor = ReferenceEngine.load(core, pages=256).executor
    batching = BatchingRuntime.for_executor(executor, engine.contract, AdmissionLimits(max_active=4, queue_capacity=8),
                                            pages=256, speculative_width=4, history_drafting=True,
                                            adaptive_speculation=True)
    results = serve_all(batching, [prepared(frontend, name, f"c-{name}").runtime_request for name in NAMES])
    assert [tokens for tokens, _ in results] == [plain[name][0] for name in NAMES]
