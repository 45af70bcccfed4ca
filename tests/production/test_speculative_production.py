"""Speculation in the production runtime (fp32, Triton interpreted, CPU): the batching scheduler runs
decode lanes in SPECULATIVE rounds on the production executor, and every request's tokens equal plain
greedy decoding in the reference runtime, for both program shapes; startup options refuse what the
core did not capture in one line."""

from __future__ import annotations

import random

import pytest

from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.events import Finished
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import InvalidRuntimeOptions, RuntimeOptions
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.production.helpers import CPU_FP32
from tests.runtime.streams import serve_all

pytestmark = pytest.mark.slow
GREEDY = SamplingParams(temperature=0.0)


@pytest.fixture(scope="module")
def cores(tiny_checkpoint, tiny_draft):
    def core(budget):
        return prepare_checkpoint(tiny_checkpoint("qwen2"), PreparationOptions(
            dtype="fp32", draft=tiny_draft("qwen2", "perturbed"), page_tokens=4, batch_capacities=(1, 2, 4),
            prefill_capacities=(8, 16), context_tokens=64, speculative_widths=(2, 4), speculative_budget=budget))
    return {"rectangular": core(None), "confidence": core(6)}


@CPU_FP32
@pytest.mark.parametrize("shape", ["rectangular", "confidence"])
def test_production_speculation_gives_the_plain_greedy_tokens(cores, shape):
    from helios.production.loading import load_native_model, runtime_for

    core = cores[shape]
    rng = random.Random(5)
    requests = [GenerationRequest(tuple(rng.randrange(256) for _ in range(rng.randrange(5, 20))),
                                  max_tokens=rng.randrange(5, 15), sampling=GREEDY, ignore_eos=True) for _ in range(4)]
    plain = ReferenceEngine.load(core, pages=64)
    expected = [list(plain.generate(r)) for r in requests]
    options = RuntimeOptions(AdmissionLimits(max_active=4, queue_capacity=8), speculative_width=4)
    model = load_native_model(core, device="cpu", pages=40, speculative_width=4)
    runtime = runtime_for(model, options)
    results = serve_all(runtime, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)])
    assert [tokens for tokens, _ in results] == expected
    assert all(isinstance(terminal, Finished) for _, terminal in results)
    counters = runtime.scheduler.counters
    assert counters.speculative_rounds >= 1 and 0 < counters.accepted_drafts <= counters.offered_drafts


def test_a_width_above_the_captured_ones_is_refused_in_one_line(cores):
    from helios.production.loading import load_runtime

    options = RuntimeOptions(AdmissionLimits(max_active=2), speculative_width=8, device="cpu")
    with pytest.raises(InvalidRuntimeOptions, match="--speculative-width 8 exceeds the core's widest captured width 4"):
        load_runtime(cores["rectangular"], options)


@CPU_FP32
def test_production_adaptive_choice_gives_the_plain_greedy_tokens(cores):
    """`--speculative-width auto`: the load times each DECODE and SPECULATIVE graph's round (one eager
    run each on a CPU), and the scheduler chooses each cohort's program from that table and the
    acceptance it observes; the tokens are plain greedy decoding's, and the metrics carry the table."""
    from helios.production.loading import load_native_model, runtime_for

    core = cores["rectangular"]
    rng = random.Random(9)
    requests = [GenerationRequest(tuple(rng.randrange(256) for _ in range(rng.randrange(3, 10))),
                                  max_tokens=rng.randrange(4, 9), sampling=GREEDY, ignore_eos=True) for _ in range(3)]
    plain = ReferenceEngine.load(core, pages=64)
    expected = [list(plain.generate(r)) for r in requests]
    model = load_native_model(core, device="cpu", pages=40, speculative_width=4, measure_costs=True)
    assert "costs" in [phase.name for phase in model.startup]
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=4, queue_capacity=8),
                                                adaptive_speculation=True))
    results = serve_all(runtime, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)])
    assert [tokens for tokens, _ in results] == expected
    m = runtime.metrics()
    assert {(c.operation_name, c.lanes, c.width) for c in m.round_costs} == {
        ("decode", b, 1) for b in (1, 2, 4)} | {("speculative", b, w) for b in (1, 2, 4) for w in (2, 4)}
    # the first cohort explores (acceptance unknown: the configured width), the rest are chosen
    assert m.speculative_rounds + m.plain_choices >= 1 and m.fallback_choices >= 1
    assert sum(m.speculative_rounds_by_width.values()) == m.speculative_rounds
    assert sum(m.offered_by_position.values()) == m.offered_drafts


@CPU_FP32
def test_a_loads_samplers_share_one_storage_of_the_most_rows(cores, monkeypatch):
    """Every sampler a load makes (each graph's sampling rows, the verifier's target and draft rows,
    the proposals' probabilities) and every prompt scorer holds its [rows, V] buffers in the device's
    one `SamplerStorage`: as many rows as the largest user of each buffer in its slot (the verifier's
    draft rows' kept weights in a slot of their own), not the sum over the core's capacities."""
    from helios.production.kernels import sampling, scores
    from helios.production.loading import load_native_model

    made: list[sampling.Sampler] = []
    scorers: list[scores.PromptScorer] = []
    for cls, into in ((sampling.Sampler, made), (scores.PromptScorer, scorers)):
        monkeypatch.setattr(cls, "__init__", lambda self, *a, _init=cls.__init__, _into=into, **k:
                            (_init(self, *a, **k), _into.append(self))[0])
    load_native_model(cores["rectangular"], device="cpu", pages=40, speculative_width=4)
    monkeypatch.undo()
    (storage,) = {id(s.storage): s.storage for s in [*made, *scorers]}.values()
    vocab = made[0].vocab
    per_row = sampling.Sampler(1, vocab, "cpu", block=made[0].block).storage.bytes  # one row's buffers
    most = {slot: max(s.rows for s in made if s.slot == slot) for slot in (0, 1)}
    assert len({s.rows for s in made if s.slot == 0}) > 2  # several shapes share slot 0
    # each buffer holds the most rows of its users: the samplers of its slot (slot 0 for scratch rows;
    # the sort's buffers, a group of rows, where a sampler has that form) and, in slot 0, the prompt
    # scorers' log-softmax, sort and order rows
    held: dict[tuple[int, str], int] = {}
    for sampler in made:  # weights and kept in the sampler's slot, its scratch rows in slot 0
        names = {(sampler.slot, name): sampler.rows for name in ("weights", "kept")}
        names |= {(0, name): sampler.rows for name in ("z", "e")}
        if sampler.rank_form in ("sort", "chunked"):  # the sort's rows, a group of them at a time
            names |= {(0, name): sampler.sort_rows
                      for name in ("sorted_z", "order", "ordered", "before", "sorted_e", "keep")}
        for key, rows in names.items():
            held[key] = max(held.get(key, 0), rows)
    for scorer in scorers:
        for name in ("z", "e", "sorted_z", "order"):
            held[0, name] = max(held.get((0, name), 0), scorer.group_rows)
    assert scorers and storage.rows_held == held  # the core scores prompts: its scorers share the storage
    assert storage.bytes >= most[0] * per_row + most[1] * vocab * (8 + 8)
    assert storage.bytes < sum(s.rows for s in made) * per_row  # what a buffer set for each shape held
