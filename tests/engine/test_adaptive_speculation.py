"""Adaptive speculative program choice in the reference runtimes (fp32, CPU): the batching engine over
the reference executor and the sequential reference runtime, choosing each round's program from the
round costs the reference executor measured and the acceptance observed, give plain greedy decoding's
tokens; forged cost tables steer the choice both ways; a request that opted out never speculates;
the per-position, per-width and cost metrics move, in the runtime's snapshot and on /metrics."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest
from prometheus_client import generate_latest

from helios.engine.worker import BatchingRuntime
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.proto import contract_pb2
from helios.reference.engine import ReferenceEngine
from helios.reference.executor import ReferenceExecutor
from helios.runtime.costs import RoundCost, RoundCosts
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions
from helios.runtime.request import GenerationRequest, SamplingParams
from helios.server.metrics import HeliosCollector, ServerCounters, build_registry
from tests.runtime.streams import serve_all

C = contract_pb2
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def core(tiny_checkpoint, tiny_draft):
    return prepare_checkpoint(tiny_checkpoint("llama"), PreparationOptions(
        dtype="fp32", draft=tiny_draft("llama", "perturbed"), page_tokens=4, batch_capacities=(1, 2, 4),
        prefill_capacities=(8, 16), context_tokens=64, speculative_widths=(2, 4)))


@pytest.fixture(scope="module")
def workload(core):
    rng = random.Random(7)
    requests = [GenerationRequest(tuple(rng.randrange(256) for _ in range(rng.randrange(3, 14))),
                                  max_tokens=rng.randrange(6, 16), sampling=GREEDY, ignore_eos=True) for _ in range(5)]
    plain = ReferenceEngine.load(core, pages=64)
    return requests, [list(plain.generate(r)) for r in requests]


class ForgedCosts:
    """The reference executor with a cost table of the test's making (what `round_costs` returns)."""

    def __init__(self, executor: ReferenceExecutor, costs: RoundCosts) -> None:
        self.executor, self.costs, self.frames = executor, costs, executor.frames

    def submit(self, plan):
        self.executor.submit(plan)

    def collect(self, plan):
        return self.executor.collect(plan)

    def round_costs(self):
        return self.costs


def _forged(engine: ReferenceEngine, speculative) -> RoundCosts:
    """Every DECODE round 1 ms, every SPECULATIVE one `speculative(W)` ms."""
    entries = []
    for g in engine.contract.graphs:
        if g.operation == C.OPERATION_DECODE:
            entries.append(RoundCost(g.name, g.operation, g.batch_capacity, 1, 1e-3))
        elif g.operation == C.OPERATION_SPECULATIVE:
            width = g.speculative.verify_tokens
            entries.append(RoundCost(g.name, g.operation, g.batch_capacity, width, 1e-3 * speculative(width)))
    return RoundCosts(tuple(entries))


def _batching(executor, engine):
    """The batching engine over `executor`, adaptive, the widest width (4) its fallback. Over forged
    costs the served rounds' wall times are not observed, so the forged table stays the costs."""
    runtime = BatchingRuntime.for_executor(executor, engine.contract, AdmissionLimits(max_active=4, queue_capacity=16),
                                           pages=48, speculative_width=4, adaptive_speculation=True)
    if isinstance(executor, ForgedCosts):
        runtime.scheduler.served.observe = lambda graph, seconds: None
    return runtime


def _prepared(requests, opt_out=()):
    return [PreparedRequest(f"r{i}", r, observe_tokens=True, speculation=i not in opt_out)
            for i, r in enumerate(requests)]


def _scrape(runtime) -> str:
    collector = HeliosCollector(runtime.metrics, ServerCounters(), lambda: 0, 1)
    return generate_latest(build_registry(collector)).decode()


def test_batching_adaptive_choice_gives_the_plain_greedy_tokens_and_its_metrics_move(core, workload):
    requests, expected = workload
    engine = ReferenceEngine.load(core, pages=48)
    rt = _batching(engine.executor, engine)
    results = serve_all(rt, _prepared(requests))
    assert [tokens for tokens, _ in results] == expected
    m = rt.metrics()
    # the reference executor measured every DECODE and SPECULATIVE graph's round
    measured = {(c.operation_name, c.lanes, c.width) for c in m.round_costs}
    assert ("decode", 1, 1) in measured and ("speculative", 4, 4) in measured and len(measured) == 9
    assert all(c.seconds > 0 for c in m.round_costs)
    assert sum(m.speculative_rounds_by_width.values()) == m.speculative_rounds
    # the first cohort explores (acceptance unknown: the configured width), the rest are chosen
    assert m.speculative_rounds + m.plain_choices >= 1 and m.fallback_choices == 1
    assert sum(m.offered_by_position.values()) == m.offered_drafts
    assert sum(m.accepted_by_position.values()) == m.accepted_drafts
    # acceptance at a position needs acceptance at every one before it
    positions = sorted(m.accepted_by_position)
    assert all(m.accepted_by_position[k] <= m.accepted_by_position.get(k - 1, m.accepted_drafts) for k in positions)
    text = _scrape(rt)
    assert 'helios_round_cost_seconds{lanes="4",operation="speculative",width="4"}' in text
    # explorations of wider unmeasured programs are counted and exported (a speculative round each)
    assert 0 <= m.explored_choices <= m.speculative_rounds
    assert f"helios_speculative_explored_choices_total {float(m.explored_choices)}" in text
    # every completed round's wall time was observed, by graph (the served costs the choice refreshes from)
    served = {c.graph: c for c in m.served_round_costs}
    assert sum(c.rounds for c in served.values()) == sum(m.graph_launches.values())
    assert all(c.seconds > 0 and c.rounds >= 1 for c in served.values())
    variants = {g.name: g for g in engine.contract.graphs}
    assert all(c.lanes == variants[c.graph].batch_capacity for c in served.values())
    for c in served.values():
        labels = f'graph="{c.graph}",lanes="{c.lanes}",operation="{c.operation_name}",width="{c.width}"'
        assert f"helios_served_round_cost_seconds{{{labels}}}" in text
        assert f"helios_served_rounds_total{{{labels}}} {float(c.rounds)}" in text
    assert "request" not in "".join(line for line in text.splitlines() if line.startswith("helios_served_"))
    if m.speculative_rounds:
        assert 'helios_speculative_position_offered_total{position="1"}' in text
        assert "helios_speculative_width_rounds_total{width=" in text


def test_forged_costs_steer_the_choice_both_ways_with_the_same_tokens(core, workload):
    requests, expected = workload
    engine = ReferenceEngine.load(core, pages=48)
    dear = _batching(ForgedCosts(engine.executor, _forged(engine, lambda w: 2.0 * w)), engine)  # W tokens at most, 2W ms
    assert [tokens for tokens, _ in serve_all(dear, _prepared(requests))] == expected
    counters = dear.scheduler.counters
    # only the exploring round (acceptance unknown) speculates
    assert counters.speculative_rounds == counters.fallback_choices == 1 and counters.plain_choices >= 1
    engine = ReferenceEngine.load(core, pages=48)
    cheap = _batching(ForgedCosts(engine.executor, _forged(engine, lambda w: 0.5)), engine)  # 1 token alone beats decode
    assert [tokens for tokens, _ in serve_all(cheap, _prepared(requests))] == expected
    counters = cheap.scheduler.counters
    assert counters.speculative_rounds >= 1 and counters.plain_choices == 0
    # at 0.5 ms whatever the width, the widest is the best wherever a lane has room for its rows
    assert counters.rounds_by_width.get(4, 0) > counters.rounds_by_width.get(2, 0)


def test_under_two_frames_lanes_chosen_for_plain_decoding_fill_both_frames(core, workload):
    """A cohort for which plain decoding was chosen decodes as any decode lane for a few tokens, so
    under two frames its rounds are pipelined (then it drains and is chosen for again)."""
    requests, expected = workload
    engine = ReferenceEngine.load(core, pages=48)
    executor = ReferenceExecutor.load(core, pages=48, frames=2)
    rt = _batching(ForgedCosts(executor, _forged(engine, lambda w: 2.0 * w)), engine)
    in_flight, pipelined = [], []
    submit, collect = executor.submit, executor.collect

    def spy_submit(plan):
        if plan.operation == C.OPERATION_DECODE:  # a decode lane whose previous round is still in flight
            pipelined.extend(set(plan.request_ids) & {r for held in in_flight for r in held.request_ids})
        in_flight.append(plan)
        submit(plan)

    def spy_collect(plan):
        in_flight.remove(plan)
        return collect(plan)

    executor.submit, executor.collect = spy_submit, spy_collect
    assert [tokens for tokens, _ in serve_all(rt, _prepared(requests))] == expected
    counters = rt.scheduler.counters
    assert rt.scheduler.config.frames == 2 and counters.speculative_rounds == counters.fallback_choices == 1
    assert pipelined and rt.scheduler.counters.plain_choices >= 2


def test_a_request_that_opted_out_decodes_plainly_among_speculating_ones(core, workload):
    requests, expected = workload
    engine = ReferenceEngine.load(core, pages=48)
    rt = _batching(ForgedCosts(engine.executor, _forged(engine, lambda w: 0.5)), engine)
    seen = []
    submit = engine.executor.submit

    def spy(plan):
        if plan.operation == C.OPERATION_SPECULATIVE:
            seen.extend(plan.request_ids)
        submit(plan)

    engine.executor.submit = spy
    results = serve_all(rt, _prepared(requests, opt_out={0}))
    assert [tokens for tokens, _ in results] == expected
    assert seen and "r0" not in seen


def test_the_sequential_reference_runtime_chooses_adaptively(core, workload):
    from helios.reference import load_runtime

    requests, expected = workload
    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=8),
                                                adaptive_speculation=True))
    results = serve_all(runtime, _prepared(requests, opt_out={1}))
    assert [tokens for tokens, _ in results] == expected
    m = runtime.metrics()
    # the one-lane graphs it runs were measured: DECODE and each width's SPECULATIVE
    assert {(c.operation_name, c.lanes, c.width) for c in m.round_costs} == {
        ("decode", 1, 1), ("speculative", 1, 2), ("speculative", 1, 4)}
    assert m.speculative_rounds + m.plain_choices >= 1
    assert m.fallback_choices >= 1  # the first round explores: acceptance unknown, the configured width
    assert sum(m.speculative_rounds_by_width.values()) == m.speculative_rounds
    assert sum(m.offered_by_position.values()) == m.offered_drafts
    assert 'helios_round_cost_seconds{lanes="1",operation="decode",width="1"}' in _scrape(runtime)
    # its served rounds' wall time, by graph: every decoding round (the prefill ones too)
    served = {c.graph: c for c in m.served_round_costs}
    assert {c.lanes for c in served.values()} == {1} and all(c.seconds > 0 for c in served.values())
    assert sum(c.rounds for c in served.values() if c.operation == C.OPERATION_SPECULATIVE) == m.speculative_rounds
    assert 'helios_served_round_cost_seconds{graph="' in _scrape(runtime)
    # every request opted out: no round speculates, none is even chosen
    runtime = load_runtime(core, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=8),
                                                adaptive_speculation=True))
    results = serve_all(runtime, _prepared(requests[:2], opt_out={0, 1}))
    assert [tokens for tokens, _ in results] == expected[:2]
    m = runtime.metrics()
    assert m.speculative_rounds == 0 and m.plain_choices == 0


def test_a_lane_kept_on_plain_decoding_doubles_its_stint_up_to_the_cap(core):
    """Each new choice costs a lane its place in the second frame for a round, so a lane for which
    plain decoding keeps winning is chosen for after 8, 16, 32, ... tokens (at most PLAIN_TOKENS_MAX),
    and its tokens stay the plain greedy ones."""
    from helios.engine import scheduler as scheduling

    request = GenerationRequest((5, 17, 99, 3), max_tokens=56, sampling=GREEDY, ignore_eos=True)
    engine = ReferenceEngine.load(core, pages=48)
    expected = list(ReferenceEngine.load(core, pages=48).generate(request))
    rt = _batching(ForgedCosts(engine.executor, _forged(engine, lambda w: 2.0 * w)), engine)
    stints = []
    choose = rt.scheduler._speculative_width

    def spy(order):
        width = choose(order)
        if width == 0:
            stints.append(order[0].plain_stint)
        return width

    rt.scheduler._speculative_width = spy
    assert [tokens for tokens, _ in serve_all(rt, _prepared([request]))] == [expected]
    assert stints[:3] == [8, 16, 32] and len(stints) <= 4, stints
    assert scheduling.PLAIN_TOKENS == 8 and max(stints) <= scheduling.PLAIN_TOKENS_MAX


class SteppedClock:
    """A clock the test moves: each SPECULATIVE round the executor collects takes 8 s, every other 1 s."""

    def __init__(self, executor) -> None:
        self.now = 100.0
        collect = executor.collect

        def timed(plan):
            self.now += 8.0 if plan.operation == C.OPERATION_SPECULATIVE else 1.0
            return collect(plan)

        executor.collect = timed

    def __call__(self) -> float:
        return self.now


def test_the_sequential_engine_refreshes_its_costs_from_served_rounds(core, workload):
    """The reference engine keeps the batching scheduler's served costs (ServedCosts): its table ranks
    speculation first (every width 0.5 ms against 1 ms for DECODE), but its served speculative rounds
    take 8 s of wall time; after OBSERVED_ROUNDS of them plain decoding wins, with the plain tokens."""
    from helios.engine.program_choice import OBSERVED_ROUNDS, ProgramChoice

    requests, expected = workload
    engine = ReferenceEngine.load(core, pages=48)
    clock = SteppedClock(engine.executor)
    engine = ReferenceEngine(engine.serving, engine.manifest, engine.contract, engine.executor, speculative_width=4,
                             adaptive_speculation=True, clock=clock)
    engine.choice = ProgramChoice(engine.catalog, _forged(engine, lambda w: 0.5), served=engine.served)
    operations = []
    run_round = engine.run_round

    def spy(graph, lanes, **timing):
        operations.append(engine.graphs[graph].operation)
        return run_round(graph, lanes, **timing)

    engine.run_round = spy
    assert [list(engine.generate(r)) for r in requests] == expected
    served = {c.graph: c for c in engine.served.entries(engine.catalog)}
    assert {c.seconds for c in served.values() if c.operation == C.OPERATION_SPECULATIVE} == {8.0}
    assert all(c.seconds == 1.0 for c in served.values() if c.operation != C.OPERATION_SPECULATIVE)
    # the table's choice until the served rounds of each width said otherwise (the first round explores)
    first_plain = operations.index(C.OPERATION_DECODE)
    assert OBSERVED_ROUNDS <= operations[:first_plain].count(C.OPERATION_SPECULATIVE) <= 2 * OBSERVED_ROUNDS + 1
    assert engine.speculative_counts["plain_choices"] > 0
    # then plain decoding, but for a round exploring again once the pooled evidence has aged
    assert operations[first_plain:].count(C.OPERATION_DECODE) > 20
    assert operations[first_plain:].count(C.OPERATION_SPECULATIVE) <= 1


def test_the_sequential_engine_ages_a_requests_own_evidence_through_its_plain_tokens(core, workload):
    """Nothing of a request is observed while it decodes plainly: each plain token ages its own counts
    as the pool's (one POOLED_DECAY for every PLAIN_TOKENS), so a request judged poor on its first
    rounds is tried again once they have aged; the tokens stay the plain greedy ones."""
    from helios.engine.program_choice import PLAIN_TOKENS, POOLED_DECAY, ProgramChoice

    requests, expected = workload
    engine = ReferenceEngine.load(core, pages=48)
    clock = SteppedClock(engine.executor)  # speculative rounds serve at 8 s: plain decoding wins once measured
    engine = ReferenceEngine(engine.serving, engine.manifest, engine.contract, engine.executor, speculative_width=4,
                             adaptive_speculation=True, clock=clock)
    engine.choice = ProgramChoice(engine.catalog, _forged(engine, lambda w: 0.5), served=engine.served)
    plain = []
    program = engine._program

    def spy(acceptance, room):
        before = acceptance.evidence
        chosen = program(acceptance, room)
        if chosen is None:
            plain.append((before, acceptance.evidence))
        return chosen

    engine._program = spy
    assert [list(engine.generate(r)) for r in requests] == expected
    aged = [(before, after) for before, after in plain if before > 0]
    assert len(aged) > 5
    assert all(after == pytest.approx(before * POOLED_DECAY ** (1 / PLAIN_TOKENS)) for before, after in aged)


def test_the_sequential_engine_chooses_copies_or_its_draft_as_the_batching_scheduler_does(core):
    """History drafting in the reference engine: the same CopiedChoice as the batching scheduler's
    (copies tried first, then whichever source its requests' rounds accepted more), greedy tokens
    still plain decoding's. The prompts repeat a phrase, so copied runs are found; the perturbed draft
    predicts the target better than those copies do, so copies lose and are skipped."""
    requests = [GenerationRequest((40 + i, 41, 42, 43, 44) * 2 + (40 + i, 41), max_tokens=20, sampling=GREEDY,
                                  ignore_eos=True) for i in range(3)]
    plain = ReferenceEngine.load(core, pages=48)
    expected = [list(plain.generate(r)) for r in requests]
    engine = ReferenceEngine.load(core, pages=48, speculative_width=4, history_drafting=True)
    skipped = []
    skip = engine.copied_choice.skipped
    engine.copied_choice.skipped = lambda: (skipped.append(1), skip())
    assert [list(engine.generate(r)) for r in requests] == expected
    choice = engine.copied_choice
    assert choice.pooled_copied.evidence > 0 and choice.pooled_learned.evidence > 0
    assert engine.speculative_counts["copied_offered"] > 0 and skipped
    assert choice.pooled_copied.mean(0.5) < choice.pooled_learned.mean(0.5)


def test_the_served_probe_serves_every_decode_and_speculative_graph(core):
    """`helios inspect --runtime --served-rounds N` (helios/engine/served_probe.py) over the reference
    executor: every DECODE graph at each lane capacity and every SPECULATIVE graph at each capacity
    and width served at least N rounds through the batching scheduler, and the executor is left
    idle (a plain request served afterwards gives the plain greedy tokens)."""
    from helios.engine.served_probe import probe_served_costs

    engine = ReferenceEngine.load(core, pages=48)
    served = probe_served_costs(engine.executor, engine.contract, pages=48, rounds=2)
    expected = sorted((g.name, g.batch_capacity, g.speculative.verify_tokens if g.speculative is not None else 1)
                      for g in engine.contract.graphs
                      if g.operation in (C.OPERATION_DECODE, C.OPERATION_SPECULATIVE))
    assert sorted((c.graph, c.lanes, c.width) for c in served) == expected
    assert all(c.rounds >= 2 and c.seconds > 0 for c in served)
    request = GenerationRequest((5, 17, 99, 3), max_tokens=6, sampling=GREEDY, ignore_eos=True)
    rt = BatchingRuntime.for_executor(engine.executor, engine.contract, AdmissionLimits(max_active=1), pages=48)
    assert [tokens for tokens, _ in serve_all(rt, _prepared([request]))] == [
        list(ReferenceEngine.load(core, pages=48).generate(request))]


def test_runtimes_serving_one_executor_in_turn_share_what_the_choice_learned(core, workload):
    """`memory` given: a runtime records its served rounds and the acceptance of its lanes into it,
    and the next runtime over the same executor starts from them (its choice reads the costs the
    first one's rounds measured, not its table, and the pooled acceptance observed), with the same
    greedy tokens."""
    from helios.engine.program_choice import OBSERVED_ROUNDS, ChoiceMemory

    requests, expected = workload
    engine = ReferenceEngine.load(core, pages=48)
    memory = ChoiceMemory()
    shared = memory.served

    def runtime():
        return BatchingRuntime.for_executor(engine.executor, engine.contract,
                                            AdmissionLimits(max_active=4, queue_capacity=16), pages=48,
                                            speculative_width=4, adaptive_speculation=True, memory=memory)

    first = runtime()
    # the workload three times over: enough rounds that some graph the choice weighs is measured
    # (OBSERVED_ROUNDS served rounds) however the wall-clock costs steer the choice among the graphs
    assert [tokens for tokens, _ in serve_all(first, _prepared(requests * 3))] == expected * 3
    learned = {c.graph: c.rounds for c in first.metrics().served_round_costs}
    assert sum(learned.values()) == sum(first.metrics().graph_launches.values())
    evidence = memory.pooled.evidence
    assert evidence > 0 and first.scheduler.pooled is memory.pooled
    second = runtime()
    assert second.scheduler.served is shared and second.scheduler.choice.served is shared
    assert second.scheduler.pooled is memory.pooled and second.scheduler.copied_choice is memory.copied
    assert not second.scheduler.choice.explores(second.scheduler.pooled)  # acceptance known: no exploring round
    tabled = {c.graph for c in first.metrics().round_costs}  # the DECODE and SPECULATIVE graphs the choice weighs
    measured = [g for g, rounds in learned.items() if rounds >= OBSERVED_ROUNDS and g in tabled]
    assert measured, learned
    for graph in measured:  # the second runtime's choice reads the first one's measurements
        assert second.scheduler.choice.seconds(graph) == shared.seconds(graph) is not None
    assert [tokens for tokens, _ in serve_all(second, _prepared(requests))] == expected
    both = {c.graph: c.rounds for c in second.metrics().served_round_costs}
    assert sum(both.values()) == sum(learned.values()) + sum(second.metrics().graph_launches.values())
    # a runtime given none keeps its own
    assert BatchingRuntime.for_executor(
        engine.executor, engine.contract, AdmissionLimits(max_active=4, queue_capacity=16), pages=48,
        speculative_width=4, adaptive_speculation=True).scheduler.pooled is not memory.pooled


def _lane(sampled: int, plain_until: int = 0, acceptance=None):
    """A decode lane as `_speculative_width` reads it: 40 tokens allowed, well within the context."""
    return SimpleNamespace(request=SimpleNamespace(generation=SimpleNamespace(max_tokens=40)), sampled=sampled,
                           unknown=0, frontier=10 + sampled, acceptance=acceptance, plain_until=plain_until,
                           plain_stint=8 if plain_until else 0, cancelled=False, ended=False)


def test_the_choice_is_the_decode_populations_and_speculation_ends_the_plain_stints(core):
    """Lanes in a plain stint are weighed with the cohort ready to speculate: a cohort of one lane
    whose draft accepts well would speculate alone (W4 at 2.5 ms against 1 ms for DECODE), but beside
    two lanes in stints whose drafts accept poorly the population decodes plainly, and the cohort gets
    a stint of its own (its evidence aged as the pool's, the pool by the cohort's share of the
    population); where speculation wins the stints of the others end, an ended request's and one
    without room left (its rounds in flight end its output) untouched and never weighed."""
    from helios.engine.program_choice import AcceptanceEstimate

    engine = ReferenceEngine.load(core, pages=48)
    rt = _batching(ForgedCosts(engine.executor, _forged(engine, lambda w: 2.5)), engine)
    scheduler = rt.scheduler
    scheduler.pooled.observe(7, 3)  # acceptance known: the choice decides (no fallback width)
    good = AcceptanceEstimate(accepted=950.0, rejected=50.0)
    ready = [_lane(3, acceptance=good)]
    assert scheduler.choice.decide(scheduler.pooled, [good], [37]).speculative  # alone, it would speculate
    stinted = [_lane(5, 9, AcceptanceEstimate(accepted=5.0, rejected=95.0)),
               _lane(6, 14, AcceptanceEstimate(accepted=4.0, rejected=96.0))]
    ended = _lane(2, 9)
    ended.ended = True
    spent = _lane(38, 44, AcceptanceEstimate(accepted=1.0, rejected=9.0))
    spent.unknown = 2  # its rounds in flight end its output: no room left, not the choice's
    scheduler._running = ready + stinted + [ended, spent]
    weighed = []
    decide = scheduler.choice.decide

    def spy(pooled, estimates, rooms):
        weighed.append(list(estimates))
        return decide(pooled, estimates, rooms)

    scheduler.choice.decide = spy
    assert scheduler._speculative_width(ready) == 0
    assert weighed == [[good, stinted[0].acceptance, stinted[1].acceptance]]
    assert ready[0].plain_until == 3 + 8 and good.accepted == pytest.approx(950 * 0.9)
    # the pool ages by the cohort's share of the population: one lane of three, a stint of 8 tokens
    assert scheduler.pooled.accepted == pytest.approx(3 * 0.9 ** (1 / 3))  # 3 of 7 accepted, observed above
    assert [s.plain_until for s in stinted] == [9, 14]  # their stints go on
    # the same lanes where speculation is cheap: the population speculates, the stints end
    rt = _batching(ForgedCosts(engine.executor, _forged(engine, lambda w: 0.5)), engine)
    scheduler = rt.scheduler
    scheduler.pooled.observe(7, 3)
    ready = [_lane(3, acceptance=good)]
    scheduler._running = ready + stinted + [ended, spent]
    assert scheduler._speculative_width(ready) > 0
    assert [s.plain_until for s in stinted] == [5, 6] and [s.plain_stint for s in stinted] == [0, 0]
    assert ended.plain_until == 9 and spent.plain_until == 44
