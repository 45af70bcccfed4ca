"""Scored prefill in the batching scheduler (host only, hand-built completions): a request asking for
prompt scores consumes its prompt in SCORED_PREFILL rounds only (never MIXED, while other requests
decode), its scores come out before its first token covering prompt tokens 1 .. n - 1 exactly once
(preemption and readmission included), owed positions are never served from the prefix cache, bad
scores fail the round before anything retires, and a core without the graphs refuses at admission."""

from __future__ import annotations

import numpy as np
import pytest

from helios.engine.catalog import GraphCatalog, GraphVariant
from helios.engine.config import SchedulerConfig, SchedulerRequest
from helios.engine.page_cache import PageCache
from helios.engine.scheduler import Scheduler
from helios.proto import contract_pb2
from helios.runtime.completion import CompletionRows
from helios.runtime.rounds import RoundPlan
from helios.runtime.scores import PromptScores, PromptScoresInvalid
from tests.engine.test_scheduler import catalog, request, rows

C = contract_pb2
SCORED = C.OPERATION_SCORED_PREFILL
TOP = 4


def scheduler(*, scored: bool = True, pages: int = 64, max_active: int = 4, prefix_reuse: bool = True) -> Scheduler:
    base = catalog()
    variants = [v for op in (C.OPERATION_INITIALIZATION, C.OPERATION_PREFILL, C.OPERATION_DECODE, C.OPERATION_MIXED)
                for v in base.variants(op)]
    if scored:
        variants += [GraphVariant(f"scored_prefill_p{p}", SCORED, 1, p, False) for p in (8, 16)]
    config = SchedulerConfig(max_active=max_active, queue_capacity=8, page_tokens=4, context_tokens=64,
                             input_tokens=300, sampled_tokens=300, eos_ids=(299,),
                             prompt_score_width=TOP if scored else 0)
    return Scheduler(config, GraphCatalog(variants), PageCache(pages, 4, "test", prefix_reuse=prefix_reuse))


def scores_for(plan: RoundPlan) -> PromptScores:
    """The scores a correct scored round writes: row t of the round scores with -t / 100, its top ids 0..K-1."""
    total = sum(len(lane.tokens) for lane in plan.lanes)
    top = np.tile(np.arange(TOP), (total, 1))
    alternatives = np.tile(-(1 + np.arange(TOP, dtype=np.float32)) / 10, (total, 1))
    return PromptScores(-np.arange(total, dtype=np.float32) / 100, alternatives, top.astype(np.int64))


def scored_rows(plan: RoundPlan, token: int = 7, scores: PromptScores | None = None) -> CompletionRows:
    """A scored round's rows as an executor reads them back: the completion columns and the scores."""
    plain = rows(plan, token)
    columns = {name: np.array([getattr(r, name) for r in plain]) for name in (
        "frame_index", "submission_sequence", "generation", "sampled_id", "emitted", "consumed_endpoint",
        "draft_cursor", "model_reserved", "status")}
    return CompletionRows(columns, scores_for(plan) if scores is None else scores)


def complete(s: Scheduler, plan: RoundPlan, token: int = 7):
    return s.complete(plan, scored_rows(plan, token) if plan.operation == SCORED else rows(plan, token))


def scoring(name: str, prompt: int, top: int = 2, **kwargs) -> SchedulerRequest:
    """`request` asking for prompt scores with `top` alternatives a token."""
    plain = request(name, prompt, **kwargs)
    return SchedulerRequest(name, plain.generation, prompt_logprobs=top)


def test_a_scoring_prompt_runs_in_scored_rounds_only_and_its_scores_precede_its_token():
    s = scheduler()
    s.add(request("d", 3, max_tokens=30))  # decodes while the scoring prompt is consumed
    for _ in range(2):
        complete(s, s.schedule())  # d's initialization and prefill
    s.add(scoring("a", 20, top=2))
    events, operations = [], []
    for _ in range(12):
        plan = s.schedule()
        if plan is None:
            break
        operations.append((plan.operation, plan.request_ids))
        outcomes = complete(s, plan)
        events += [(rid, event) for rid, event in outcomes.prompt_scores]
        if any(rid == "a" for rid in outcomes.request_ids):
            break
    assert all(op == SCORED for op, ids in operations if "a" in ids and op != C.OPERATION_INITIALIZATION)
    assert all(ids == ("a",) for op, ids in operations if op == SCORED)
    assert any(op == C.OPERATION_DECODE for op, _ in operations)  # d kept decoding meanwhile
    # prompt tokens 1..19: rows 0..15 of a 16-token chunk, then rows 0..2 of the 4-token chunk
    assert [(rid, e.first, len(e.logprobs)) for rid, e in events] == [("a", 1, 16), ("a", 17, 3)]
    first, second = events[0][1], events[1][1]
    assert first.logprobs[0] == 0.0 and second.logprobs == pytest.approx((0.0, -0.01, -0.02))
    assert all(len(top) == 2 and [i for i, _ in top] == [0, 1] for top in first.top + second.top)
    nxt = s.schedule()  # then it decodes like any request
    assert nxt.operation in (C.OPERATION_DECODE, C.OPERATION_MIXED) and "a" in nxt.request_ids


def test_scores_are_delivered_once_through_preemption_and_readmission():
    s = scheduler(pages=8, max_active=2)
    s.add(scoring("a", 18, top=1, max_tokens=10))
    s.add(request("b", 3, max_tokens=20, first=100))
    covered: list[int] = []
    for _ in range(300):
        plan = s.schedule()
        if plan is None:
            break
        outcomes = complete(s, plan)
        for _, event in outcomes.prompt_scores:
            covered += range(event.first, event.first + len(event.logprobs))
        for outcome in outcomes:
            if outcome.sampled == s._all[outcome.request_id].request.generation.max_tokens:
                s.finish(outcome.request_id)
    assert s.idle and covered == list(range(1, 18))


def test_positions_owed_scores_are_never_served_from_the_prefix_cache():
    s = scheduler()

    def serve(r: SchedulerRequest) -> list[RoundPlan]:
        s.add(r)
        plans = []
        while (plan := s.schedule()) is not None:
            plans.append(plan)
            for outcome in complete(s, plan):
                s.finish(outcome.request_id)
        return plans

    serve(request("first", 12, max_tokens=1))
    plain = serve(request("plain", 12, max_tokens=1))  # the same prompt: its published pages are reused
    assert plain[1].lanes[0].consumed == 8 and s.counters.reused_tokens == 8
    plans = serve(scoring("scored", 12, max_tokens=1))  # the same prompt, scored: every position recomputed
    assert plans[1].operation == SCORED and plans[1].lanes[0].consumed == 0 and len(plans[1].lanes[0].tokens) == 12
    assert s.counters.reused_tokens == 8


@pytest.mark.parametrize("broken", ["missing", "nan", "positive", "id"])
def test_bad_scores_fail_the_round_before_any_lane_retires(broken):
    s = scheduler()
    s.add(scoring("a", 5))
    complete(s, s.schedule())
    plan = s.schedule()
    scores = scores_for(plan)
    if broken == "nan":
        scores.top_logprobs[2, 1] = np.nan
    elif broken == "positive":
        scores.target[1] = 0.5
    elif broken == "id":
        scores.top_ids[0, 0] = 300
    result = scored_rows(plan, scores=scores)
    if broken == "missing":
        result.scores = None
    with pytest.raises(PromptScoresInvalid):
        s.complete(plan, result)
    assert s.oldest() is plan and s._all["a"].scored == 0  # nothing retired; the caller aborts the round


def test_admission_refuses_scores_a_core_cannot_serve_naming_why():
    without = scheduler(scored=False)
    assert "no SCORED_PREFILL graphs" in without.admission_check(scoring("a", 5))
    assert without.admission_check(request("a", 5)) is None
    too_many = scheduler().admission_check(scoring("a", 5, top=TOP + 1))
    assert f"give {TOP}" in too_many
    assert scheduler().admission_check(scoring("a", 5, top=TOP)) is None
