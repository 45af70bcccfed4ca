"""Speculative program choice from measured costs (host only, no executor): the expected-token model,
the choice's candidates, and a seeded property test over random cost tables and random acceptance
histories, through the scheduler itself, that it never chooses a program whose expected rate is below
plain decoding's (and always the best one); unknown and stale costs fall back to the configured width;
a request that opted out decodes plainly."""

from __future__ import annotations

import itertools
import random

import pytest

from helios.engine.catalog import GraphCatalog, GraphVariant
from helios.engine.config import SchedulerConfig, SchedulerRequest
from helios.engine.page_cache import PageCache
from helios.engine.program_choice import (
    OBSERVED_ROUNDS,
    OBSERVED_WEIGHT,
    PRIOR_ROUNDS,
    PRIOR_WEIGHT_LIMIT,
    SPIKE_LIMIT,
    STALE_LIMIT,
    STALE_ROUNDS,
    AcceptanceEstimate,
    ProgramChoice,
    ServedCosts,
    best,
    expected_round_tokens,
    expected_tokens,
    prior_weight,
)
from helios.engine.scheduler import Scheduler
from helios.proto import contract_pb2
from helios.runtime.completion import Completion, SpeculativeRound
from helios.runtime.costs import RoundCost, RoundCosts
from helios.runtime.request import GenerationRequest

C = contract_pb2
INIT, PREFILL, DECODE, SPEC = (C.OPERATION_INITIALIZATION, C.OPERATION_PREFILL, C.OPERATION_DECODE,
                               C.OPERATION_SPECULATIVE)


def catalog(rng: random.Random) -> GraphCatalog:
    """A random selection: DECODE at some lane capacities, SPECULATIVE at some widths and lane
    capacities, rectangular (P = B * W) or confidence (P < B * W)."""
    variants = [GraphVariant("initialization", INIT, 1, 1, True), GraphVariant("prefill_p16", PREFILL, 1, 16, True)]
    decode = sorted(rng.sample([1, 2, 4, 8], rng.randrange(1, 5)))
    variants += [GraphVariant(f"decode_b{b}", DECODE, b, b, True) for b in decode]
    for width in sorted(rng.sample([1, 2, 3, 4, 6], rng.randrange(1, 4))):
        for b in sorted(rng.sample([1, 2, 4, 8], rng.randrange(1, 4))):
            packed = b * width if rng.random() < 0.6 else rng.randrange(b, b * width + 1)
            variants.append(GraphVariant(f"speculative_b{b}_w{width}_p{packed}", SPEC, b, packed, True, width=width,
                                         drafts=width - 1, lane_limit=width,
                                         check=SpeculativeRound(packed, exact=packed == b * width)))
    return GraphCatalog(variants)


def costs_for(catalog: GraphCatalog, rng: random.Random) -> RoundCosts:
    """Random measured costs: a decode round of B lanes about base * (1 + B / 16), a speculative one
    wider by a random factor of its width (from nearly free to far dearer than plain decoding)."""
    base = rng.uniform(1e-3, 1e-2)
    entries = []
    for op in (DECODE, SPEC):
        for v in catalog.variants(op):
            seconds = base * (1 + v.batch_capacity / 16) * rng.uniform(0.8, 1.2)
            if op == SPEC:
                seconds *= 1 + rng.uniform(0.0, 2.0) * v.width
            entries.append(RoundCost(v.name, op, v.batch_capacity, v.width or 1, seconds))
    return RoundCosts(tuple(entries))


def test_expected_tokens_is_the_geometric_sum():
    for a in (0.0, 0.3, 0.9, 1.0):
        for limit in range(1, 7):
            assert expected_tokens(a, limit) == pytest.approx(sum(a ** k for k in range(limit)))


def test_rows_within_p_go_where_they_are_worth_most():
    """The greedy allocation by survival probability equals the best split of P rows (brute force)."""
    rng = random.Random(11)
    for _ in range(300):
        lanes = rng.randrange(1, 4)
        acceptances = [rng.random() for _ in range(lanes)]
        limits = [rng.randrange(1, 5) for _ in range(lanes)]
        packed = rng.randrange(lanes, sum(limits) + 2)
        brute = max(sum(expected_tokens(a, n) for a, n in zip(acceptances, split, strict=True))
                    for split in itertools.product(*(range(1, m + 1) for m in limits)) if sum(split) <= packed)
        assert expected_round_tokens(acceptances, limits, packed) == pytest.approx(brute)


@pytest.mark.parametrize("seed", range(6))
def test_a_large_cohort_weighs_each_program_as_its_lanes_do_one_by_one(seed, monkeypatch):
    """From VECTOR_LANES lanes on, the candidates' expected tokens come from one NumPy pass of power
    sums (rectangular programs whose limit every room holds): they equal `expected_round_tokens` over
    the lanes one by one, whatever the widths, capacities, rooms and acceptances (0 and 1 included)."""
    from helios.engine import program_choice
    from helios.engine.program_choice import VECTOR_LANES

    passes = []
    power_sums = program_choice._power_sums
    monkeypatch.setattr(program_choice, "_power_sums", lambda *args: passes.append(1) or power_sums(*args))
    rng = random.Random(seed)
    variants = [GraphVariant("initialization", INIT, 1, 1, True), GraphVariant("prefill_p16", PREFILL, 1, 16, True)]
    variants += [GraphVariant(f"decode_b{b}", DECODE, b, b, True) for b in (1, 64, 256)]
    for width in (2, 3, 4, 8):
        for b in (1, 64, 256):
            packed = b * width if rng.random() < 0.7 else rng.randrange(b, b * width)
            variants.append(GraphVariant(f"speculative_b{b}_w{width}", SPEC, b, packed, True, width=width,
                                         drafts=width - 1, lane_limit=width,
                                         check=SpeculativeRound(packed, exact=packed == b * width)))
    graphs = GraphCatalog(variants)
    choice = ProgramChoice(graphs, costs_for(graphs, rng))
    for _ in range(20):
        n = rng.choice((VECTOR_LANES, 100, 256, 300))
        acceptances = [rng.choice((0.0, 1.0, rng.random(), rng.uniform(0.85, 1.0))) for _ in range(n)]
        short = rng.random() < 0.3  # some lanes with less room than a width: lane by lane
        rooms = [rng.choice((1, 3, 100)) if short and rng.random() < 0.1 else 100 for _ in range(n)]
        for candidate in choice.candidates(acceptances, rooms):
            if not candidate.speculative:
                continue
            limit, lanes = candidate.variant.lane_limit, candidate.lanes
            limits = [min(limit, room) for room in rooms[:lanes]]
            direct = expected_round_tokens(acceptances[:lanes], limits, candidate.variant.packed_token_capacity)
            assert candidate.expected == pytest.approx(direct, rel=1e-12), (candidate.variant.name, n)
    assert passes  # the NumPy pass was taken


def test_acceptance_estimate_counts_a_rejection_once_a_round():
    estimate = AcceptanceEstimate()
    estimate.observe(3, 3)  # all accepted: no rejection
    estimate.observe(3, 1)  # the second proposal rejected, the third never judged
    assert (estimate.accepted, estimate.rejected) == (4, 1)
    assert estimate.mean(0.5, weight=2.0) == pytest.approx(5 / 7)
    with pytest.raises(ValueError):
        estimate.observe(2, 3)


def test_the_prior_weighs_as_rounds_of_the_pooled_draft():
    """The prior is PRIOR_ROUNDS rounds of a draft of the pooled acceptance p: PRIOR_ROUNDS rejections
    and p / (1 - p) acceptances for each; so one round rejected at its first proposal does not
    outweigh a good pooled draft, and a request whose draft accepts poorly still leaves it in a few
    rounds."""
    assert prior_weight(0.5) == pytest.approx(2 * PRIOR_ROUNDS)
    assert prior_weight(0.8) == pytest.approx(PRIOR_ROUNDS / 0.2)
    assert prior_weight(0.999) == prior_weight(1.0) == PRIOR_WEIGHT_LIMIT
    for p in (0.3, 0.6, 0.82, 0.9):
        prior = AcceptanceEstimate()
        prior.observe(1, 0)  # one immediate rejection: the estimate moves by the same share of (p - 0)
        assert prior.mean(p) == pytest.approx(p * prior_weight(p) / (1 + prior_weight(p)))
    unlucky = AcceptanceEstimate()
    unlucky.observe(7, 0)
    assert unlucky.mean(0.82) > 0.74  # a fixed four pseudo-observations gave 0.66
    poor = AcceptanceEstimate()  # a request accepting 0.3 of proposals, pooled at 0.82
    rounds = 0
    while poor.mean(0.82) >= 0.67:
        poor.observe(7, 0 if rounds % 2 else 1)  # 0.5 accepted a round, one rejection
        rounds += 1
    assert rounds <= 4


def _spec_rows(plan, rng: random.Random, acceptance: dict[str, float], token: int = 7) -> list[Completion]:
    """Rows a correct executor writes for a round: a speculative lane accepts each proposal with its
    request's true acceptance, up to its offer."""
    out = []
    offers = [lane.speculative_limit for lane in plan.lanes]
    if plan.operation == SPEC and sum(offers) > plan_packed(plan):  # a confidence program: P rows in all
        offers, rows = [1] * len(plan.lanes), plan_packed(plan) - len(plan.lanes)
        for i in itertools.cycle(range(len(offers))):
            if rows == 0 or all(o == lane.speculative_limit for o, lane in zip(offers, plan.lanes, strict=True)):
                break
            if offers[i] < plan.lanes[i].speculative_limit:
                offers[i] += 1
                rows -= 1
    for lane, request_id, offer in zip(plan.lanes, plan.request_ids, offers, strict=True):
        if plan.operation == SPEC:
            accepted = 0
            while accepted < offer - 1 and rng.random() < acceptance[request_id]:
                accepted += 1
            endpoint = lane.consumed + accepted + 1
            out.append(Completion(frame_index=plan.frame, submission_sequence=plan.sequence,
                                  generation=lane.generation, sampled_id=token, emitted=accepted + 1,
                                  consumed_endpoint=endpoint, draft_cursor=endpoint, model_reserved=-1, status=0,
                                  offer=offer, accepted_drafts=accepted, sampled_ids=(token,) * (accepted + 1)))
        else:
            out.append(Completion(frame_index=plan.frame, submission_sequence=plan.sequence,
                                  generation=lane.generation, sampled_id=token, emitted=int(lane.samples),
                                  consumed_endpoint=lane.consumed + len(lane.tokens), draft_cursor=-1,
                                  model_reserved=-1, status=0))
    return out


def plan_packed(plan) -> int:
    return int(plan.graph.split("_p")[-1]) if "_p" in plan.graph else 1 << 30


class Clock:
    """A monotonic clock the test advances (what a served round of each graph costs)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _scheduler(cat: GraphCatalog, costs: RoundCosts | None, *, fallback: int, lifetime: float | None = None,
               max_active: int = 8, clock=None) -> Scheduler:
    config = SchedulerConfig(max_active=max_active, queue_capacity=16, page_tokens=4, context_tokens=96,
                             input_tokens=300, sampled_tokens=300, speculative_width=fallback,
                             adaptive_speculation=True, cost_lifetime=lifetime)
    return Scheduler(config, cat, PageCache(256, 4, "test"), costs=costs, clock=clock or Clock())


def test_random_acceptance_never_leads_to_a_program_below_plain_decoding():
    """Property (seeded): over random selections, cost tables and requests whose drafts accept at
    random rates, every choice the scheduler makes from its completed observations has the highest
    expected rate among its candidates, never below plain decoding's, and speculation only where it
    is strictly above; the round it then submits runs that program. Served rounds cost a random
    multiple of their table entry (the host's share), so the costs the choice uses move from the
    table to the observed ones as rounds complete; every check uses the costs of its decision."""
    rng = random.Random(2026)
    checked = speculative = plain = observed = explorations = 0
    for case in range(60):
        cat = catalog(rng)
        costs = costs_for(cat, rng)
        widths = sorted({v.width for v in cat.variants(SPEC)})
        clock = Clock()
        s = _scheduler(cat, costs, fallback=max(widths), clock=clock)
        assert s.choice is not None
        table = costs.by_graph()
        served = {name: seconds * rng.uniform(0.5, 3.0) for name, seconds in table.items()}
        decisions = []
        choose = s.choice.choose
        names = [v.name for op in (DECODE, SPEC) for v in cat.variants(op)]

        def recording(acceptances, rooms, choose=choose, decisions=decisions, s=s, names=names):
            chosen = choose(acceptances, rooms)
            decisions.append((list(acceptances), list(rooms), chosen, s.choice.candidates(acceptances, rooms),
                              {name: s.choice.seconds(name) for name in names},
                              {name: s.choice.unmeasured(name) for name in names}))
            return chosen

        s.choice.choose = recording
        truth = {}
        for i in range(rng.randrange(1, 9)):
            name = f"c{case}r{i}"
            truth[name] = rng.choice([0.0, 0.1, 0.5, 0.8, 0.95, 1.0, rng.random()])
            s.add(SchedulerRequest(name, GenerationRequest(tuple(range(1, 1 + rng.randrange(1, 12))),
                                                           max_tokens=rng.randrange(2, 30))))
        for _ in range(400):
            before = len(decisions)
            plan = s.schedule()
            if plan is None:
                break
            if len(decisions) > before:  # this round's program was chosen now: it runs the choice
                chosen = decisions[-1][2]
                if chosen.speculative:
                    assert plan.operation == SPEC and cat.variant(plan.graph).width == chosen.width
                else:  # they decode plainly (this round, or after a prefill round's turn)
                    assert plan.operation != SPEC
            clock.now += served.get(plan.graph, 1e-3)
            s.complete(plan, _spec_rows(plan, rng, truth))
            for request_id in {r for r in plan.request_ids}:
                held = s._all.get(request_id)
                if held is not None and held.sampled >= held.request.generation.max_tokens:
                    s.finish(request_id)
        assert s.idle, f"case {case}: requests left unfinished"
        # every exploration the choice made is counted (helios_speculative_explored_choices)
        assert s.counters.explored_choices == sum(d[2] is not None and d[2].explores for d in decisions)
        explored: dict[str, int] = {}
        for acceptances, rooms, chosen, candidates, seconds, unmeasured in decisions:
            observed += any(seconds[name] != table[name] for name in names)
            # plain decoding's rate, from the table alone: the smallest DECODE graph holding the lanes
            lanes = min(len(acceptances), cat.max_lanes(DECODE))
            decode = min((v for v in cat.variants(DECODE) if v.batch_capacity >= lanes),
                         key=lambda v: v.batch_capacity)
            plain_rate = lanes / seconds[decode.name]
            if chosen.speculative and chosen.variant.packed_token_capacity >= chosen.lanes * chosen.width:
                # a rectangular round: every lane's geometric sum up to its limit, recomputed
                expected = sum(sum(a ** k for k in range(min(chosen.width, room)))
                               for a, room in zip(acceptances[:chosen.lanes], rooms, strict=False))
                assert chosen.expected == pytest.approx(expected)
            assert chosen.seconds == seconds[chosen.variant.name]
            top = best(candidates)
            assert chosen.rate >= plain_rate * (1 - 1e-12)
            assert chosen.explores == (chosen.variant.name != top.variant.name)
            if chosen.explores:  # a wider program no served round has measured
                assert chosen.speculative and unmeasured[chosen.variant.name] and chosen.expected > top.expected
                explored[chosen.variant.name] = explored.get(chosen.variant.name, 0) + 1
            if chosen.speculative:
                assert chosen.rate > plain_rate
                speculative += 1
            else:
                plain += 1
            checked += 1
        # a program is explored until OBSERVED_ROUNDS served rounds measure it (a round in flight
        # when the decision was made may add one more): these runs never age it past STALE_ROUNDS
        programs = {}
        for name, count in explored.items():
            v = cat.variant(name)
            programs[v.width] = programs.get(v.width, 0) + count
        assert all(count <= OBSERVED_ROUNDS + 1 for count in programs.values()), (case, explored)
        explorations += sum(programs.values())
    assert checked > 200 and speculative > 20 and plain > 20, (checked, speculative, plain)
    assert explorations > 0  # the seeded cases do reach an unmeasured wider program
    assert observed > checked // 2, (observed, checked)  # most decisions rested on served rounds' costs


def test_cheap_speculation_with_accepting_drafts_is_chosen_and_dear_speculation_is_not():
    cat = GraphCatalog([GraphVariant("initialization", INIT, 1, 1, True), GraphVariant("prefill", PREFILL, 1, 16, True),
                        GraphVariant("decode_b1", DECODE, 1, 1, True),
                        GraphVariant("speculative_b1_w4", SPEC, 1, 4, True, width=4, drafts=3, lane_limit=4,
                                     check=SpeculativeRound(4, exact=True))])

    def table(speculative_seconds):
        return RoundCosts((RoundCost("decode_b1", DECODE, 1, 1, 1.0),
                           RoundCost("speculative_b1_w4", SPEC, 1, 4, speculative_seconds)))

    choice = ProgramChoice(cat, table(1.5))
    assert choice.choose([0.9], [10]).speculative  # 3.44 tokens for 1.5 s beats 1 for 1 s
    assert not choice.choose([0.1], [10]).speculative  # 1.11 tokens for 1.5 s does not
    assert not choice.choose([0.9], [1]).speculative  # one token left: the pending row alone
    choice = ProgramChoice(cat, table(4.0))
    assert not choice.choose([1.0], [10]).speculative  # 4 tokens for 4 s: a tie goes to plain decoding
    assert best(choice.candidates([1.0], [10])).width == 1


def test_pooled_evidence_against_the_draft_ages_while_plain_decoding_runs():
    """A pool that judged the draft poor makes new requests decode plainly; each plain choice ages the
    pool toward the uniform prior, so the draft is tried again (never below plain's expected rate)."""
    cat = GraphCatalog([GraphVariant("initialization", INIT, 1, 1, True), GraphVariant("prefill", PREFILL, 1, 16, True),
                        GraphVariant("decode_b1", DECODE, 1, 1, True),
                        GraphVariant("speculative_b1_w4", SPEC, 1, 4, True, width=4, drafts=3, lane_limit=4,
                                     check=SpeculativeRound(4, exact=True))])
    costs = RoundCosts((RoundCost("decode_b1", DECODE, 1, 1, 1.0), RoundCost("speculative_b1_w4", SPEC, 1, 4, 1.5)))
    config = SchedulerConfig(max_active=1, queue_capacity=2, page_tokens=4, context_tokens=512, input_tokens=300,
                             sampled_tokens=300, speculative_width=4, adaptive_speculation=True)
    s = Scheduler(config, cat, PageCache(160, 4, "test"), costs=costs, clock=Clock())  # rounds cost the table's
    s.pooled = AcceptanceEstimate(accepted=0, rejected=5)  # five rounds that rejected their first proposal
    s.add(SchedulerRequest("a", GenerationRequest((1, 2, 3), max_tokens=300)))
    rng = random.Random(4)
    first_speculative = None
    while (plan := s.schedule()) is not None:
        if plan.operation == SPEC and first_speculative is None:
            first_speculative = (s.counters.plain_choices, s._all["a"].sampled)
        s.complete(plan, _spec_rows(plan, rng, {"a": 0.9}))
        if s._all["a"].sampled >= 300:
            s.finish("a")
    # at a = 1 / 7 plain decoding wins; 0.9 ** k (k: plain tokens / 8) ages the five rejections until
    # a >= about 0.38 wins; the stints double (8, 16, 32, ...), so that takes a few choices
    assert first_speculative is not None, "the draft was never tried again"
    choices, sampled = first_speculative
    assert 3 <= choices <= 6 and 80 < sampled < 300, first_speculative
    assert s.counters.speculative_rounds > 10  # then the request's own acceptance (0.9) keeps it speculating


def test_unknown_or_stale_costs_fall_back_to_the_configured_width():
    cat = catalog(random.Random(5))
    widths = sorted({v.width for v in cat.variants(SPEC)})
    costs = costs_for(cat, random.Random(6))
    partial = RoundCosts(tuple(e for e in costs.entries if e.operation == DECODE))
    stale = RoundCosts(costs.entries, measured_at=costs.measured_at - 100.0)
    for table, lifetime in ((None, None), (partial, None), (stale, 10.0)):
        s = _scheduler(cat, table, fallback=max(widths), lifetime=lifetime)
        assert s.choice.choose([0.5], [5]) is None
        s.add(SchedulerRequest("a", GenerationRequest((1, 2, 3), max_tokens=6)))
        rng = random.Random(1)
        while (plan := s.schedule()) is not None:
            if plan.operation == SPEC:
                assert cat.variant(plan.graph).width == max(widths)
            s.complete(plan, _spec_rows(plan, rng, {"a": 0.5}))
            if s._all["a"].sampled >= 6:
                s.finish("a")
        assert s.counters.speculative_rounds >= 1 and s.counters.fallback_choices == s.counters.speculative_rounds
    assert ProgramChoice(cat, stale, lifetime=1000.0).usable()


def test_a_request_that_opted_out_decodes_plainly():
    cat = catalog(random.Random(5))
    widths = sorted({v.width for v in cat.variants(SPEC)})
    s = _scheduler(cat, None, fallback=max(widths))
    s.add(SchedulerRequest("plain", GenerationRequest((1, 2, 3), max_tokens=8), speculation=False))
    s.add(SchedulerRequest("spec", GenerationRequest((4, 5, 6), max_tokens=8)))
    rng = random.Random(2)
    speculated = set()
    while (plan := s.schedule()) is not None:
        if plan.operation == SPEC:
            speculated.update(plan.request_ids)
        s.complete(plan, _spec_rows(plan, rng, {"plain": 1.0, "spec": 1.0}))
        for name in ("plain", "spec"):
            held = s._all.get(name)
            if held is not None and not held.ended and held.sampled >= 8:
                s.finish(name)
    assert speculated == {"spec"}


def test_served_rounds_costs_replace_the_table():
    cat = GraphCatalog([GraphVariant("initialization", INIT, 1, 1, True), GraphVariant("prefill", PREFILL, 1, 16, True),
                        GraphVariant("decode_b1", DECODE, 1, 1, True),
                        GraphVariant("speculative_b1_w4", SPEC, 1, 4, True, width=4, drafts=3, lane_limit=4,
                                     check=SpeculativeRound(4, exact=True))])
    choice = ProgramChoice(cat, RoundCosts((RoundCost("decode_b1", DECODE, 1, 1, 1.0),
                                            RoundCost("speculative_b1_w4", SPEC, 1, 4, 1.5))))
    assert choice.seconds("speculative_b1_w4") == 1.5 and choice.seconds("prefill") is None
    choice.observe("speculative_b1_w4", 6.0)
    choice.observe("speculative_b1_w4", 6.0)
    choice.observe("speculative_b1_w4", 0.0)  # not a cost (a frozen clock): ignored
    assert choice.seconds("speculative_b1_w4") == 1.5  # two served rounds are not yet enough
    assert choice.choose([0.9], [10]).speculative  # the table's: 3.44 tokens for 1.5 s beat 1 for 1 s
    choice.observe("speculative_b1_w4", 8.5)
    assert choice.seconds("speculative_b1_w4") == pytest.approx(6.0 + 0.2 * 2.5)  # the moving average
    assert choice.seconds("decode_b1") == 1.0  # not served yet, nor any graph of its program: its table cost
    assert not choice.choose([0.9], [10]).speculative  # served, 3.44 tokens take 6.5 s
    for _ in range(3):
        choice.observe("decode_b1", 3.0)  # served plain rounds cost more than the replay too
    assert choice.seconds("decode_b1") == pytest.approx(3.0)
    # both served: 3.44 tokens in 6.5 s beat 1 in 3 s; at a = 0.3, 1.42 tokens in 6.5 s do not
    assert choice.choose([0.9], [10]).speculative and not choice.choose([0.3], [10]).speculative


def _calibrated_choice() -> ProgramChoice:
    """DECODE, W4 and W8 at 1, 2, 8, 32 and 128 lanes; table costs: DECODE 1 ms, W4 2 ms and W8 4 ms
    times (1 + lanes / 32)."""
    variants = [GraphVariant("initialization", INIT, 1, 1, True), GraphVariant("prefill", PREFILL, 1, 16, True)]
    entries = []
    for b in (1, 2, 8, 32, 128):
        variants.append(GraphVariant(f"decode_b{b}", DECODE, b, b, True))
        entries.append(RoundCost(f"decode_b{b}", DECODE, b, 1, 1e-3 * (1 + b / 32)))
        for width, base in ((4, 2e-3), (8, 4e-3)):
            name = f"speculative_b{b}_w{width}"
            variants.append(GraphVariant(name, SPEC, b, b * width, True, width=width, drafts=width - 1,
                                         lane_limit=width, check=SpeculativeRound(b * width, exact=True)))
            entries.append(RoundCost(name, SPEC, b, width, base * (1 + b / 32)))
    return ProgramChoice(GraphCatalog(variants), RoundCosts(tuple(entries)))


def test_an_unserved_graph_costs_its_table_entry_calibrated_by_its_programs_nearest_served_graph():
    choice = _calibrated_choice()
    table = {g: choice.seconds(g) for g in ("speculative_b1_w8", "speculative_b2_w8", "speculative_b32_w8",
                                            "speculative_b128_w8", "speculative_b128_w4", "decode_b128")}
    assert all(choice.calibration(g) == 1.0 for g in table)  # nothing served: the raw table
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("speculative_b8_w8", 0.55 * table_cost(choice, "speculative_b8_w8"))
        choice.observe("speculative_b128_w8", 0.50 * table["speculative_b128_w8"])
        choice.observe("speculative_b2_w8", 0.80 * table["speculative_b2_w8"])
    # nearest in lanes by ratio: 32 lanes is 4x from 8 and 128, the larger wins the tie; 1 lane takes 2
    assert choice.seconds("speculative_b32_w8") == pytest.approx(0.50 * table["speculative_b32_w8"])
    assert choice.seconds("speculative_b1_w8") == pytest.approx(0.80 * table["speculative_b1_w8"])
    # served graphs cost their own served rounds; other programs (W4, DECODE) are not calibrated by W8's
    assert choice.seconds("speculative_b128_w8") == pytest.approx(0.50 * table["speculative_b128_w8"])
    assert choice.seconds("speculative_b128_w4") == table["speculative_b128_w4"]
    assert choice.seconds("decode_b128") == table["decode_b128"]


def table_cost(choice: ProgramChoice, graph: str) -> float:
    return choice.costs.by_graph()[graph]


def test_an_unserved_width_is_chosen_where_its_programs_served_rounds_say_it_serves_faster():
    """The H100 case (BENCHMARKS.md, issue #18): 128 lanes at a = 0.95, W4's rounds served at their
    table cost, W8's at about half of theirs at 32 lanes. Raw, W8's 128-lane table entry loses to W4
    (6.0 tokens a lane in 20 ms against 3.7 in 10 ms); calibrated by its 32-lane graph's served
    rounds it wins, is chosen, and its own rounds then decide."""
    choice = _calibrated_choice()
    lanes = [0.95] * 128
    rooms = [100] * 128
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("speculative_b128_w4", table_cost(choice, "speculative_b128_w4"))
        choice.observe("speculative_b128_w8", table_cost(choice, "speculative_b128_w8"))
    assert choice.choose(lanes, rooms).variant.name == "speculative_b128_w4"  # both measured: W4 wins
    choice = _calibrated_choice()
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("speculative_b128_w4", table_cost(choice, "speculative_b128_w4"))
        choice.observe("speculative_b32_w8", 0.5 * table_cost(choice, "speculative_b32_w8"))
    assert not choice.unmeasured("speculative_b128_w8")  # calibrated by its program's 32-lane graph
    assert choice.choose(lanes, rooms).variant.name == "speculative_b128_w8"
    for _ in range(OBSERVED_ROUNDS):  # its own rounds serve at its raw table cost after all: W4 again
        choice.observe("speculative_b128_w8", table_cost(choice, "speculative_b128_w8"))
    assert choice.choose(lanes, rooms).variant.name == "speculative_b128_w4"


def test_a_wider_program_never_served_is_explored_until_its_rounds_measure_it():
    """W4's 128-lane rounds measured at their table cost and no W8 graph ever served: W8's raw table
    entry loses to W4 (6.0 tokens a lane in 20 ms against 3.7 in 10 ms) but beats plain decoding
    (1 in 5 ms), so W8 is explored, OBSERVED_ROUNDS rounds; what they measure then decides (at its
    table cost, W4; at half of it, W8) and a measured program is not explored again."""
    for served, winner in ((1.0, "speculative_b128_w4"), (0.5, "speculative_b128_w8")):
        choice = _calibrated_choice()
        lanes, rooms = [0.95] * 128, [100] * 128
        for _ in range(OBSERVED_ROUNDS):
            choice.observe("speculative_b128_w4", table_cost(choice, "speculative_b128_w4"))
        assert best(choice.candidates(lanes, rooms)).variant.name == "speculative_b128_w4"
        explored = 0
        while (chosen := choice.choose(lanes, rooms)).variant.name == "speculative_b128_w8" and choice.unmeasured(
                "speculative_b128_w8"):
            explored += 1
            choice.observe("speculative_b128_w8", served * table_cost(choice, "speculative_b128_w8"))
        assert explored == OBSERVED_ROUNDS and chosen.variant.name == winner
        for _ in range(10):  # measured: the rates decide from here on
            assert choice.choose(lanes, rooms).variant.name == winner


def test_a_wider_program_slower_than_plain_decoding_by_its_table_is_not_explored():
    """Unmeasured W4 and W8 whose table rates are not above plain decoding's are not explored
    (speculation only above plain's rate by the costs of the decision); once W4 is measured above
    it, the wider W8, above it by its table too, is."""
    choice = _calibrated_choice()
    lanes, rooms = [0.2] * 8, [100] * 8  # W8: 1.25 tokens a lane in 5 ms; W4: 1.25 in 2.5; plain 1 in 1.25
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("decode_b8", table_cost(choice, "decode_b8"))
    assert choice.choose(lanes, rooms).variant.name == "decode_b8"
    assert choice.unmeasured("speculative_b8_w8") and choice.unmeasured("speculative_b8_w4")
    lanes = [0.9] * 8  # W4 (3.44 a lane in 2.5 ms) beats plain; W8 (5.7 in 5 ms) wider, above plain too
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("speculative_b8_w4", table_cost(choice, "speculative_b8_w4"))
    assert choice.choose(lanes, rooms).variant.name == "speculative_b8_w8"


def test_a_forgotten_sibling_no_longer_calibrates():
    choice = _calibrated_choice()
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("speculative_b8_w8", 0.5 * table_cost(choice, "speculative_b8_w8"))
    assert choice.calibration("speculative_b32_w8") == pytest.approx(0.5)
    for _ in range(STALE_ROUNDS + 1):
        choice.observe("decode_b8", 1e-3)
    assert choice.calibration("speculative_b32_w8") == 1.0
    assert choice.seconds("speculative_b8_w8") == table_cost(choice, "speculative_b8_w8")


def _one_lane_choice() -> ProgramChoice:
    cat = GraphCatalog([GraphVariant("initialization", INIT, 1, 1, True), GraphVariant("prefill", PREFILL, 1, 16, True),
                        GraphVariant("decode_b1", DECODE, 1, 1, True),
                        GraphVariant("speculative_b1_w4", SPEC, 1, 4, True, width=4, drafts=3, lane_limit=4,
                                     check=SpeculativeRound(4, exact=True))])
    return ProgramChoice(cat, RoundCosts((RoundCost("decode_b1", DECODE, 1, 1, 1.0),
                                          RoundCost("speculative_b1_w4", SPEC, 1, 4, 1.5))))


def test_an_observation_counts_at_most_the_spike_limit_times_the_estimate():
    choice = _one_lane_choice()
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("speculative_b1_w4", 2.0)
    choice.observe("speculative_b1_w4", 100.0)  # a collector pause inside the round's interval
    assert choice.seconds("speculative_b1_w4") == pytest.approx(2.0 + OBSERVED_WEIGHT * (SPIKE_LIMIT * 2.0 - 2.0))
    metrics = choice.served.entries(choice.catalog)
    assert [(e.graph, e.rounds) for e in metrics] == [("speculative_b1_w4", OBSERVED_ROUNDS + 1)]


def test_a_stale_inflated_cost_expires_and_the_program_is_measured_again():
    """a = 0.6: W4 emits 2.18 tokens a round in expectation, plain decoding 1 for 1.0 s. W4's rounds
    cost 2.0 s (chosen) until one landed on a pause (estimate 3.2 s: plain chosen). After STALE_ROUNDS
    plain rounds W4's observations are forgotten: its table cost (1.5 s) makes it best again, and its
    fresh rounds decide."""
    choice = _one_lane_choice()
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("speculative_b1_w4", 2.0)
    assert choice.choose([0.6], [10]).speculative
    choice.observe("speculative_b1_w4", 50.0)
    assert not choice.choose([0.6], [10]).speculative
    rounds = 0
    while not choice.choose([0.6], [10]).speculative:
        choice.observe("decode_b1", 1.0)
        rounds += 1
        assert rounds <= STALE_ROUNDS + 1, "the inflated cost never expired"
    assert rounds == STALE_ROUNDS + 1 and choice.served.seconds("speculative_b1_w4") is None
    assert choice.seconds("speculative_b1_w4") == 1.5  # its table cost again
    for _ in range(OBSERVED_ROUNDS):
        choice.observe("speculative_b1_w4", 2.0)
    assert choice.seconds("speculative_b1_w4") == pytest.approx(2.0) and choice.choose([0.6], [10]).speculative
    assert choice.served.rounds("speculative_b1_w4") == 2 * OBSERVED_ROUNDS + 1  # the metric counts every round


def test_a_program_slow_every_time_is_retried_at_doubling_intervals():
    """W4's served rounds always cost 4.0 s (rate 0.55 against plain's 1.0): serving 20 STALE_ROUNDS
    rounds, the choice re-measures it after each expiry, OBSERVED_ROUNDS rounds a time, and each
    expiry waits twice the one before: after 1, 2, 4 and 8 STALE_ROUNDS (the next, 16, past the
    run), so 5 measurements in all where a fixed interval made 20."""
    choice = _one_lane_choice()
    measured_at = []
    for i in range(20 * STALE_ROUNDS):
        if choice.choose([0.6], [10]).speculative:
            if choice.served.seconds("speculative_b1_w4") is None and choice.served.rounds("speculative_b1_w4") % OBSERVED_ROUNDS == 0:
                measured_at.append(i)
            choice.observe("speculative_b1_w4", 4.0)
        else:
            choice.observe("decode_b1", 1.0)
    assert choice.served.rounds("speculative_b1_w4") == 5 * OBSERVED_ROUNDS
    gaps = [b - a - OBSERVED_ROUNDS for a, b in itertools.pairwise(measured_at)]
    assert gaps == [STALE_ROUNDS + 1, 2 * STALE_ROUNDS + 1, 4 * STALE_ROUNDS + 1, 8 * STALE_ROUNDS + 1]


def test_the_expiry_backs_off_to_its_limit_and_resets_once_chosen_on_its_cost():
    """A graph forgotten again and again waits at most STALE_LIMIT rounds; served on its own measured
    cost (its OBSERVED_ROUNDS observations not forgotten) it waits STALE_ROUNDS again."""
    served = ServedCosts()
    interval = STALE_ROUNDS
    for _ in range(8):
        for _ in range(OBSERVED_ROUNDS):
            served.observe("w4", 4.0)
        for _ in range(interval):
            served.observe("decode", 1.0)
        assert served.seconds("w4") == 4.0, "forgotten early"
        served.observe("decode", 1.0)
        assert served.seconds("w4") is None, "never forgotten"
        interval = min(2 * interval, STALE_LIMIT)
    assert interval == STALE_LIMIT
    for _ in range(OBSERVED_ROUNDS + 1):  # measured anew, then served on that cost
        served.observe("w4", 4.0)
    for _ in range(STALE_ROUNDS + 1):
        served.observe("decode", 1.0)
    assert served.seconds("w4") is None
def test_the_scheduler_reports_each_served_rounds_wall_time_and_the_choice_follows():
    """Through the scheduler: the table ranks speculation first (a = 0.9: 3.4 tokens for 1.5 s against
    1 for 1 s), but served speculative rounds take 8 s of wall time, host work and lost overlap
    included; after a few of them plain decoding is chosen, and each interval is measured from the
    previous completion (pipelined rounds) or from the round's scheduling (after an idle worker)."""
    cat = GraphCatalog([GraphVariant("initialization", INIT, 1, 1, True), GraphVariant("prefill", PREFILL, 1, 16, True),
                        GraphVariant("decode_b1", DECODE, 1, 1, True),
                        GraphVariant("speculative_b1_w4", SPEC, 1, 4, True, width=4, drafts=3, lane_limit=4,
                                     check=SpeculativeRound(4, exact=True))])
    costs = RoundCosts((RoundCost("decode_b1", DECODE, 1, 1, 1.0), RoundCost("speculative_b1_w4", SPEC, 1, 4, 1.5)))
    clock = Clock()
    config = SchedulerConfig(max_active=1, queue_capacity=2, page_tokens=4, context_tokens=512, input_tokens=300,
                             sampled_tokens=300, speculative_width=4, adaptive_speculation=True)
    s = Scheduler(config, cat, PageCache(160, 4, "test"), costs=costs, clock=clock)
    observed = []
    observe = s.served.observe
    s.served.observe = lambda graph, seconds: (observed.append((graph, seconds)), observe(graph, seconds))
    s.add(SchedulerRequest("a", GenerationRequest((1, 2, 3), max_tokens=120)))
    rng = random.Random(3)
    clock.now += 50.0  # an idle worker before the first round: not part of its cost
    operations = []
    while (plan := s.schedule()) is not None:
        operations.append(plan.operation)
        clock.now += 8.0 if plan.operation == SPEC else 1.0
        s.complete(plan, _spec_rows(plan, rng, {"a": 0.9}))
        if s._all["a"].sampled >= 120:
            s.finish("a")
    assert observed[0][1] == 1.0  # the first round, from its scheduling, not from the idle start
    assert {seconds for graph, seconds in observed if graph == "speculative_b1_w4"} == {8.0}
    first_plain = operations.index(DECODE, operations.index(SPEC))
    assert operations[:first_plain].count(SPEC) >= 3  # the table's choice, until served rounds said otherwise
    assert s.counters.plain_choices >= 1 and operations[first_plain:].count(SPEC) <= 2
