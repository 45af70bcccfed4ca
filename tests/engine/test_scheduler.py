"""The batching scheduler with hand-built completions (host only, no executor): cohorts, graph choice,
the frame rule, completion validation before retirement, cancellation fences, preemption."""

from __future__ import annotations

import dataclasses

import pytest

from helios.engine.catalog import GraphCatalog, GraphVariant
from helios.engine.config import SchedulerConfig, SchedulerRequest
from helios.engine.outcomes import LaneOutcome, RoundOutcomes
from helios.engine.page_cache import PageCache
from helios.engine.scheduler import QueueFull, Scheduler
from helios.proto import contract_pb2
from helios.runtime.completion import (
    AcceptedCountInvalid,
    Completion,
    EndpointPastReservation,
    GenerationMismatch,
    SubmissionOrderViolated,
)
from helios.runtime.request import GenerationRequest
from helios.runtime.rounds import RoundPlan

C = contract_pb2
INIT, PREFILL, DECODE, MIXED = (C.OPERATION_INITIALIZATION, C.OPERATION_PREFILL, C.OPERATION_DECODE,
                                C.OPERATION_MIXED)


def catalog(*, mixed: bool = True, device_pending: bool = False, init_batches: tuple[int, ...] = (1,)
            ) -> GraphCatalog:
    variants = [GraphVariant("initialization" if b == 1 else f"initialization_b{b}", INIT, b, b, device_pending)
                for b in init_batches]
    variants += [GraphVariant(f"prefill_p{p}", PREFILL, 1, p, device_pending) for p in (8, 16)]
    variants += [GraphVariant(f"decode_b{b}", DECODE, b, b, device_pending) for b in (1, 2, 4)]
    if mixed:
        variants += [GraphVariant(f"mixed_b4_p{p}", MIXED, 4, p, device_pending) for p in (11, 19)]
    return GraphCatalog(variants)


def scheduler(*, pages: int = 64, mixed: bool = True, device_pending: bool = False, frames: int = 1,
              framed: bool = False, max_active: int = 4, queue_capacity: int = 8,
              init_batches: tuple[int, ...] = (1,)) -> Scheduler:
    # `frames`: the transport's; `framed`: the executor holds two (rounds in flight: the fewer of both)
    config = SchedulerConfig(max_active=max_active, queue_capacity=queue_capacity, page_tokens=4,
                             context_tokens=64, input_tokens=300, sampled_tokens=300, eos_ids=(299,),
                             frames=frames if framed else 1)
    return Scheduler(config, catalog(mixed=mixed, device_pending=device_pending, init_batches=init_batches),
                     PageCache(pages, 4, "test"))


def request(name: str, prompt: int, max_tokens: int = 8, first: int = 1, **flags) -> SchedulerRequest:
    tokens = tuple(range(first, first + prompt))
    return SchedulerRequest(name, GenerationRequest(tokens, max_tokens=max_tokens), **flags)


def rows(plan: RoundPlan, token: int = 7) -> list[Completion]:
    """The completion rows a correct executor writes for `plan`."""
    return [Completion(frame_index=plan.frame, submission_sequence=plan.sequence, generation=lane.generation,
                       sampled_id=token, emitted=int(lane.samples),
                       consumed_endpoint=lane.consumed + len(lane.tokens), draft_cursor=-1, model_reserved=-1,
                       status=0) for lane in plan.lanes]


def run(s: Scheduler, plan: RoundPlan, token: int = 7):
    return s.complete(plan, rows(plan, token))


def test_a_new_request_initializes_then_prefills_in_the_smallest_fitting_graph():
    s = scheduler(mixed=False)
    s.add(request("a", 5))
    init = s.schedule()
    assert init.operation == INIT and init.graph == "initialization"
    assert init.lanes[0].tokens == () and not init.lanes[0].samples
    assert run(s, init) == []
    prefill = s.schedule()
    assert prefill.graph == "prefill_p8"  # 5 tokens: the smallest PREFILL capacity that holds them
    (lane,) = prefill.lanes
    assert lane.tokens == (1, 2, 3, 4, 5) and lane.samples and lane.prompt_tokens_in_round == 5
    (outcome,) = run(s, prefill, token=42)
    assert (outcome.request_id, outcome.token, outcome.sampled) == ("a", 42, 1)
    decode = s.schedule()
    assert decode.graph == "decode_b1" and decode.lanes[0].tokens == (42,)
    assert decode.lanes[0].prompt_tokens_in_round == 0 and decode.lanes[0].consumed == 5


def test_admissions_initialize_together_in_the_smallest_initialization_graph_that_holds_them():
    s = scheduler(init_batches=(1, 2, 4), max_active=4)
    for name in "abc":
        s.add(request(name, 3))
    init = s.schedule()  # three admissions, one round: the 4-lane variant holds them
    assert init.operation == INIT and init.graph == "initialization_b4" and init.request_ids == ("a", "b", "c")
    assert all(lane.tokens == () and not lane.samples for lane in init.lanes)
    assert len({lane.slot for lane in init.lanes}) == 3
    assert run(s, init) == []
    prefill = s.schedule()  # then all three prefill in one MIXED round
    assert prefill.operation == MIXED and prefill.request_ids == ("a", "b", "c")
    run(s, prefill)
    s.add(request("d", 3))
    late = s.schedule()  # a later admission initializes before the decode round, alone
    assert late.graph == "initialization" and late.request_ids == ("d",)


def test_a_long_prompt_is_chunked_into_the_prepared_capacities():
    s = scheduler(mixed=False)
    s.add(request("a", 20))
    run(s, s.schedule())
    first = s.schedule()
    assert first.graph == "prefill_p16" and len(first.lanes[0].tokens) == 16 and not first.lanes[0].samples
    assert run(s, first) == []
    second = s.schedule()
    assert second.graph == "prefill_p8" and second.lanes[0].tokens == (17, 18, 19, 20)
    assert second.lanes[0].consumed == 16 and second.lanes[0].samples


def test_cohorts_mix_prefill_and_decode_in_the_smallest_mixed_graph():
    s = scheduler()
    s.add(request("a", 3))
    s.add(request("b", 3))
    for _ in range(2):
        run(s, s.schedule())  # two initializations
    both = s.schedule()  # two prefills, no decode yet: one MIXED round holds both
    assert both.operation == MIXED and both.graph == "mixed_b4_p11" and both.request_ids == ("a", "b")
    run(s, both)
    s.add(request("c", 12))
    run(s, s.schedule())  # c's initialization
    plan = s.schedule()
    assert plan.operation == MIXED
    assert plan.request_ids == ("a", "b", "c")  # decode lanes first, then the prefill chunk
    assert [len(lane.tokens) for lane in plan.lanes] == [1, 1, 12]
    assert [lane.samples for lane in plan.lanes] == [True, True, True]
    assert plan.graph == "mixed_b4_p19"  # 14 tokens: p11 is too small


def test_prefill_lanes_share_a_mixed_round_only_where_the_first_leaves_room():
    """a's 20 prompt tokens fill the largest PREFILL round (16) alone: a PREFILL round of a, not a
    MIXED round adding a sliver of b; then a's last 4 leave room, and a MIXED round holds both."""
    s = scheduler()
    s.add(request("a", 20))
    s.add(request("b", 3, first=100))
    for _ in range(2):
        run(s, s.schedule())  # two initializations
    alone = s.schedule()
    assert alone.operation == PREFILL and alone.request_ids == ("a",) and len(alone.lanes[0].tokens) == 16
    run(s, alone)
    shared = s.schedule()
    assert shared.operation == MIXED and shared.request_ids == ("a", "b")
    assert [len(lane.tokens) for lane in shared.lanes] == [4, 3] and shared.graph == "mixed_b4_p11"


def test_decode_only_cohorts_use_the_smallest_batch_that_holds_them():
    s = scheduler(mixed=False)
    for name in "abc":
        s.add(request(name, 2))
    for _ in range(3):
        run(s, s.schedule())  # initializations
    decodes = []
    for _ in range(6):
        plan = s.schedule()
        if plan.operation == DECODE:
            decodes.append((plan.graph, len(plan.lanes)))
        run(s, plan)
    assert decodes == [("decode_b1", 1), ("decode_b2", 2), ("decode_b4", 3)]


def test_without_a_mixed_graph_prefill_and_decode_rounds_alternate():
    s = scheduler(mixed=False)
    s.add(request("a", 2))
    run(s, s.schedule())
    run(s, s.schedule())  # a prefilled, now decoding
    s.add(request("b", 40, max_tokens=4))
    run(s, s.schedule())  # b's initialization
    operations = []
    for _ in range(4):
        plan = s.schedule()
        operations.append(plan.operation)
        run(s, plan)
    assert operations == [DECODE, PREFILL, DECODE, PREFILL]


def test_two_frames_only_where_allowed():
    s = scheduler(device_pending=True, frames=2, framed=True)
    s.add(request("a", 2, max_tokens=10))
    run(s, s.schedule())
    run(s, s.schedule())  # prefill: a decodes from now on
    assert s.max_inflight() == 2
    first = s.schedule()
    assert first.operation == DECODE and first.frame == 0
    second = s.schedule()  # the same lane again: its pending token is on the device
    assert second is not None and second.frame == 1 and second.lanes[0].consumed == first.lanes[0].consumed + 1
    assert s.schedule() is None  # both frames are taken
    run(s, first, token=11)
    (outcome,) = run(s, second, token=12)
    assert outcome.sampled == 3


@pytest.mark.parametrize("flag", ["host_stop", "constrained"])
def test_a_string_stop_or_a_grammar_forces_one_frame(flag):
    s = scheduler(device_pending=True, frames=2, framed=True)
    s.add(request("a", 2))
    s.add(request("b", 2, **{flag: True}))
    assert s.max_inflight() == 2  # nothing is active yet
    plan = s.schedule()
    assert s.max_inflight() == 1 and s.schedule() is None  # b is active: one outstanding round
    run(s, plan)
    s.finish("b")
    assert s.max_inflight() == 2


def test_one_frame_when_the_pending_token_is_host_fed():
    s = scheduler(device_pending=False, frames=2, framed=True)
    s.add(request("a", 2))
    assert s.max_inflight() == 1
    s.schedule()
    assert s.schedule() is None


def test_the_frame_metrics_follow_constrained_submissions():
    s = scheduler()
    s.add(request("a", 2, constrained=True))
    s.add(request("b", 2))
    for _ in range(3):
        run(s, s.schedule())  # two initializations, one MIXED prefill of both
    plan = s.schedule()
    assert plan.operation == MIXED or plan.operation == DECODE
    run(s, plan)
    assert s.counters.constrained_max_inflight == 1


def _prefilled(s: Scheduler, *names: str) -> RoundPlan:
    for name in names:
        s.add(request(name, 3))
    for _ in names:
        run(s, s.schedule())
    run(s, s.schedule())
    return s.schedule()


@pytest.mark.parametrize("corrupt, error", [
    (lambda row, plan: dataclasses.replace(row, generation=row.generation + 1), GenerationMismatch),
    (lambda row, plan: dataclasses.replace(row, submission_sequence=plan.sequence - 1), SubmissionOrderViolated),
    (lambda row, plan: dataclasses.replace(row, emitted=2), AcceptedCountInvalid),
    (lambda row, plan: dataclasses.replace(row, consumed_endpoint=10_000), EndpointPastReservation),
])
def test_an_invalid_completion_retires_no_lane(corrupt, error):
    s = scheduler()
    plan = _prefilled(s, "a", "b")
    before = [(q.consumed, list(q.known), q.sampled) for q in (s._all["a"], s._all["b"])]
    good, bad = rows(plan)
    with pytest.raises(error) as caught:
        s.complete(plan, [good, corrupt(bad, plan)])
    assert "slot" in str(caught.value)
    after = [(q.consumed, list(q.known), q.sampled) for q in (s._all["a"], s._all["b"])]
    assert after == before  # the valid first lane did not retire either
    assert s.abort(plan) == ["a", "b"]
    assert s.idle and s.cache.gauges().in_use == 0


def test_rounds_retire_in_submission_order():
    s = scheduler(device_pending=True, frames=2, framed=True)
    s.add(request("a", 2, max_tokens=10))
    run(s, s.schedule())
    run(s, s.schedule())
    first, second = s.schedule(), s.schedule()
    with pytest.raises(SubmissionOrderViolated):
        s.complete(second, rows(second))
    run(s, first)
    run(s, second)


def test_a_duplicate_slot_in_a_round_is_rejected():
    s = scheduler()
    plan = _prefilled(s, "a", "b")
    doubled = dataclasses.replace(plan, lanes=(plan.lanes[0], plan.lanes[0]), request_ids=("a", "a"))
    s._outstanding[0] = doubled
    with pytest.raises(SubmissionOrderViolated, match="twice"):
        s.complete(doubled, rows(doubled))


def test_cancellation_mid_flight_releases_only_after_the_fence():
    s = scheduler()
    plan = _prefilled(s, "a", "b")
    pages_held = s.cache.gauges().in_use
    s.cancel("a")
    assert s.released() == []  # in flight: slot and pages stay until the round completes
    assert s.cache.gauges().in_use == pages_held
    outcomes = run(s, plan)
    assert [o.request_id for o in outcomes] == ["b"]  # a's token is suppressed
    assert s.released() == ["a"]
    assert s.cache.gauges().in_use < pages_held
    assert s.active == 1


def test_cancelled_lanes_publish_no_prefix():
    s = scheduler()
    s.add(request("a", 9))
    run(s, s.schedule())
    plan = s.schedule()
    s.cancel("a")
    run(s, plan)
    assert s.cache.gauges().cached == 0


def test_a_cancelled_pending_request_is_released_at_once():
    s = scheduler(max_active=1)
    s.add(request("a", 3))
    s.add(request("b", 3))
    s.schedule()
    s.cancel("b")
    assert s.released() == ["b"] and s.pending == 0


def test_preemption_readmits_and_never_fails_a_request_that_fits():
    # 6 pages of 4 tokens; each request reaches 3 + 12 - 1 = 14 positions: 4 pages. Two cannot both finish.
    s = scheduler(pages=6, max_active=2)
    s.add(request("a", 3, max_tokens=12))
    s.add(request("b", 3, max_tokens=12))
    sampled = {"a": 0, "b": 0}
    for _ in range(200):
        plan = s.schedule()
        if plan is None:
            break
        for outcome in run(s, plan):
            sampled[outcome.request_id] = outcome.sampled
            if outcome.sampled == 12:
                s.finish(outcome.request_id)
    assert sampled == {"a": 12, "b": 12}
    assert s.counters.preemptions >= 1 and s.counters.readmissions >= 1
    assert s.idle and s.cache.gauges().in_use == 0


def test_readmission_refeeds_history_and_ends_in_the_pending_token():
    s = scheduler(pages=6, max_active=2)
    s.add(request("a", 3, max_tokens=12))
    s.add(request("b", 3, max_tokens=12, first=100))  # no prefix shared with a
    refed = None
    for _ in range(200):
        plan = s.schedule()
        if plan is None:
            break
        if plan.operation != INIT and s.counters.readmissions and refed is None:
            lanes = [lane for lane, rid in zip(plan.lanes, plan.request_ids, strict=True) if rid == "b"]
            if lanes and len(lanes[0].tokens) > 1:
                refed = lanes[0]
        for outcome in run(s, plan):
            if outcome.sampled == 12:
                s.finish(outcome.request_id)
    assert refed is not None
    # history past the prompt is host-fed as prompt tokens; the last sampled token is the pending one
    assert refed.samples and refed.prompt_tokens_in_round == len(refed.tokens) - 1


def test_admission_checks_and_the_bounded_pending_deque():
    s = scheduler(pages=4, queue_capacity=2)
    assert "context" in s.admission_check(request("x", 60, max_tokens=8))
    assert "input vocabulary" in s.admission_check(
        SchedulerRequest("y", GenerationRequest((1, 400), max_tokens=2)))
    assert "cache pages" in s.admission_check(request("z", 10, max_tokens=10))  # 19 positions: 5 pages
    assert s.admission_check(request("ok", 10, max_tokens=7)) is None  # 16 positions: 4 pages
    s.add(request("a", 2))
    s.add(request("b", 2))
    with pytest.raises(QueueFull):
        s.add(request("c", 2))


def test_page_table_updates_carry_only_new_entries():
    s = scheduler(mixed=False)
    s.add(request("a", 3, max_tokens=10))
    init = s.schedule()
    assert init.page_table_updates == ((0, 0, ()),)  # a new slot generation rewrites its row: no page yet
    run(s, init)
    prefill = s.schedule()
    assert prefill.page_table_updates == ((0, 0, (0,)),)
    run(s, prefill)
    decode = s.schedule()  # position 3 still lies in page 0
    assert decode.page_table_updates == ()
    run(s, decode)
    grow = s.schedule()  # position 4 needs page 1: one new entry from index 1
    assert grow.page_table_updates == ((0, 1, (1,)),)


def test_the_host_half_imports_neither_torch_nor_triton():
    import subprocess
    import sys

    code = ("import sys, helios.engine.worker, helios.engine.scheduler, helios.engine.page_cache, "
            "helios.runtime.completion; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_page_table_updates_wait_for_a_graph_that_binds_the_page_table():
    """Initialization binds no page table: a request admitted onto reused prefix pages gets those
    entries in its first round whose graph uploads page tables, from index 0."""
    variants = [GraphVariant("initialization", INIT, 1, 1, False, page_table=False)]
    variants += [GraphVariant(f"prefill_p{p}", PREFILL, 1, p, False) for p in (8, 16)]
    variants += [GraphVariant("decode_b4", DECODE, 4, 4, False)]
    config = SchedulerConfig(max_active=2, queue_capacity=4, page_tokens=4, context_tokens=64, input_tokens=300,
                             sampled_tokens=300)
    s = Scheduler(config, GraphCatalog(variants), PageCache(16, 4, "test"))
    s.add(request("a", 9, max_tokens=1))
    run(s, s.schedule())
    (outcome,) = run(s, s.schedule())  # a's prefill: pages 0 and 1 complete, published
    s.finish("a")
    s.add(request("b", 9, max_tokens=2))
    init = s.schedule()
    assert init.operation == INIT and init.lanes[0].page_ids[:2] == (0, 1)  # reused prefix pages
    assert init.page_table_updates == ()
    run(s, init)
    prefill = s.schedule()
    assert prefill.lanes[0].consumed == 8 and prefill.lanes[0].page_ids[:2] == (0, 1)
    assert prefill.page_table_updates == ((prefill.lanes[0].slot, 0, prefill.lanes[0].page_ids),)


def test_forming_a_second_frame_round_decides_the_frame_rule_once():
    """The frame rule looks at every running request: asking it once per lane made forming a second
    round quadratic in the lanes in flight."""
    s = scheduler(device_pending=True, frames=2, framed=True, max_active=4)
    for name in "abcd":
        s.add(request(name, 2, max_tokens=20))
    for _ in range(4):
        run(s, s.schedule())  # initializations
    run(s, s.schedule())  # one MIXED prefill of all four: they decode from now on
    run(s, s.schedule())  # a decode round: the next one may take the second frame
    first = s.schedule()
    assert first.operation == DECODE and len(first.lanes) == 4
    calls = []
    rule = s.max_inflight
    s.max_inflight = lambda: calls.append(1) or rule()
    second = s.schedule()
    assert second is not None and len(second.lanes) == 4 and second.frame != first.frame
    assert len(calls) <= 3


def test_a_round_after_a_failed_second_frame_takes_the_free_frame():
    """A second-frame round whose submission failed is aborted: the next round goes to the frame the
    outstanding round does not hold (frames alternate, but never into a held one)."""
    s = scheduler(device_pending=True, frames=2, framed=True, max_active=4)
    for name in "ab":
        s.add(request(name, 2, max_tokens=20))
    for _ in range(2):
        run(s, s.schedule())  # initializations
    run(s, s.schedule())  # a MIXED prefill of both: they decode from now on
    run(s, s.schedule())  # a decode round: the next one may take the second frame
    first = s.schedule()
    second = s.schedule()
    assert second is not None and second.frame != first.frame
    assert set(s.abort(second)) == {"a", "b"}  # the executor refused it: its requests end
    s.add(request("c", 2, max_tokens=20))
    third = s.schedule()  # c's initialization, while `first` is still outstanding
    assert third is not None and third.operation == INIT and third.frame != first.frame


def test_a_readmitted_lane_host_feeds_its_last_token_when_the_device_owns_pending_tokens():
    """A device-owned pending token lives in the state of the admission that sampled it: after
    preemption the request's last sampled token is re-fed by the host (as a prompt token), and
    decode rounds of that admission read the device's pending token again."""
    s = scheduler(pages=6, max_active=2, device_pending=True)
    s.add(request("a", 3, max_tokens=12))
    s.add(request("b", 3, max_tokens=12, first=100))
    refed, later_decodes = None, []
    for _ in range(200):
        plan = s.schedule()
        if plan is None:
            break
        for lane, rid in zip(plan.lanes, plan.request_ids, strict=True):
            if rid == "b" and s.counters.readmissions and plan.operation != INIT:
                if refed is None and len(lane.tokens) > 1:
                    refed = lane
                elif refed is not None:
                    later_decodes.append(lane)
        for outcome in run(s, plan):
            if outcome.sampled == 12:
                s.finish(outcome.request_id)
    assert refed is not None and refed.samples
    assert refed.prompt_tokens_in_round == len(refed.tokens)  # every re-fed token from the host
    assert later_decodes and all(lane.prompt_tokens_in_round == 0 for lane in later_decodes)


def test_preemption_only_when_it_can_make_room():
    """A lane short of pages preempts younger idle requests only when releasing them would cover the
    shortfall; preempting ones that cannot (their pages are too few) throws their work away for nothing."""
    s = scheduler(pages=4, max_active=3, mixed=False)
    for name, prompt in (("o", 8), ("a", 4), ("y", 3)):
        s.add(request(name, prompt, max_tokens=1))
    for _ in range(3):
        run(s, s.schedule())  # initializations
    o, a, y = (s._all[name] for name in "oay")
    o.pages.reserve(8)  # 2 pages
    y.pages.reserve(4)  # 1 page: one page is left
    assert not s._reserve(a, 12, keep=set())  # 3 pages: the free one and y's make 2
    assert s.counters.preemptions == 0 and y.slot is not None
    assert s._reserve(a, 8, keep=set())  # 2 pages: y's page makes room
    assert s.counters.preemptions == 1 and y.slot is None and len(a.pages.pages) == 2


def test_preempting_requests_that_share_pages_frees_what_only_they_hold():
    """Pages two younger requests share are freed by preempting both: that counts as room."""
    s = scheduler(pages=5, max_active=3, mixed=False)
    s.add(request("p", 9, max_tokens=1))  # publishes pages 0 and 1
    run(s, s.schedule())
    run(s, s.schedule())
    s.finish("p")
    for name in ("o", "y", "z"):
        s.add(request(name, 9 if name != "o" else 2, max_tokens=1, first=1 if name != "o" else 50))
    for _ in range(3):
        run(s, s.schedule())  # initializations; y and z took references on the two published pages
    o, y, z = (s._all[name] for name in "oyz")
    assert y.pages.pages == z.pages.pages == [0, 1] and s.cache.available == 3
    assert s._reserve(o, 20, keep=set())  # 5 pages: the 3 free ones and the 2 only y and z hold
    assert s.counters.preemptions == 2 and len(o.pages.pages) == 5


def test_round_outcomes_are_columns_equal_to_their_lane_outcomes():
    outcomes = RoundOutcomes()
    outcomes.add("a", 5, 1)
    outcomes.add("b", 7, 3)
    assert (outcomes.request_ids, outcomes.tokens, outcomes.sampled) == (["a", "b"], [5, 7], [1, 3])
    assert outcomes == [LaneOutcome("a", 5, 1), LaneOutcome("b", 7, 3)] and len(outcomes) == 2
    assert outcomes[1].token == 7 and outcomes != [LaneOutcome("a", 5, 1)]
    with pytest.raises(ValueError, match="complete once read"):
        outcomes.add("c", 1, 1)


def test_decode_rounds_keep_the_cohort_and_skip_unchanged_page_tables():
    s = scheduler(mixed=False)
    for name in "ab":
        s.add(request(name, 3, max_tokens=12))
    seen = []
    while len(seen) < 8:
        plan = s.schedule()
        if plan.operation == DECODE:
            seen.append(plan)
        outcomes = run(s, plan, token=9)
        assert outcomes.request_ids == [rid for rid, lane in zip(plan.request_ids, plan.lanes, strict=True)
                                        if lane.samples]
    # page_tokens 4: a decode round uploads a page-table entry only when a lane's pages grew
    for plan in seen:
        grown = [lane for lane in plan.lanes if (lane.consumed + 1) % 4 == 1]
        assert len(plan.page_table_updates) == len(grown)
        for (slot, start, entries), lane in zip(plan.page_table_updates, grown, strict=True):
            assert (slot, start, entries) == (lane.slot, len(lane.page_ids) - 1, lane.page_ids[-1:])


def test_a_completion_failing_partway_through_retirement_releases_every_lane_once():
    """Host code raising while `complete` retires a round's lanes (after validation): `abort` ends
    every request of the round and gives back their slots and pages, without taking back the round
    count of lanes `complete` had already retired (twice would leave them never released)."""

    class Refusing(list):
        def append(self, token):
            raise RuntimeError("injected: host fault while retiring")

    s = scheduler()
    for name in ("a", "b"):
        s.add(request(name, 3))
    while (plan := s.schedule()) is not None and plan.operation == INIT:
        run(s, plan)
    assert plan is not None and len(plan.lanes) == 2  # one round of both prompts, each sampling
    s._all[plan.request_ids[1]].known = Refusing(s._all[plan.request_ids[1]].known)  # lane 0 retires first
    with pytest.raises(RuntimeError, match="injected"):
        run(s, plan)
    assert sorted(s.abort(plan)) == ["a", "b"]
    assert s.idle and not s._all and s.cache.available == 64 and not s.cache.referenced()
