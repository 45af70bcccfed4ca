"""The batching scheduler's speculative rounds (reference executor, fp32, CPU): decode lanes of a
speculative core run SPECULATIVE rounds of the selected width, several requests a round, and every
request's tokens equal plain greedy decoding's, under page pressure (preemption and readmission),
with output limits and EOS ids inside accepted runs, for both program shapes; the counters and
metrics count the rounds, offered and accepted drafts."""

from __future__ import annotations

import random

import pytest

from helios.engine.worker import BatchingRuntime
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.reference.executor import ReferenceExecutor
from helios.runtime.events import Finished
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.runtime.streams import serve_all

GREEDY = SamplingParams(temperature=0.0)


def _options(draft, budget):
    return PreparationOptions(dtype="fp32", draft=draft, page_tokens=4, batch_capacities=(1, 2, 4),
                              prefill_capacities=(8, 16), context_tokens=64, speculative_widths=(2, 4),
                              speculative_budget=budget)


@pytest.fixture(scope="module")
def cores(tiny_checkpoint, tiny_draft):
    built = {}

    def core(kind, budget):
        if (kind, budget) not in built:
            built[(kind, budget)] = prepare_checkpoint(tiny_checkpoint("llama"), _options(tiny_draft("llama", kind),
                                                                                          budget))
        return built[(kind, budget)]
    return core


def _serve(core, requests, *, pages, width, frames=None):
    engine = ReferenceEngine.load(core, pages=pages)
    executor = engine.executor if frames is None else ReferenceExecutor.load(core, pages=pages, frames=frames)
    rt = BatchingRuntime.for_executor(executor, engine.contract, AdmissionLimits(max_active=4, queue_capacity=16),
                                      pages=pages, speculative_width=width)
    prepared = [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)]
    return serve_all(rt, prepared), rt


def _workload(count, seed):
    rng = random.Random(seed)
    return [GenerationRequest(tuple(rng.randrange(256) for _ in range(rng.randrange(5, 20))),
                              max_tokens=rng.randrange(5, 15), sampling=GREEDY, ignore_eos=True)
            for _ in range(count)]


@pytest.mark.parametrize("kind", ["same", "perturbed"])
@pytest.mark.parametrize("budget", [None, 6], ids=["rectangular", "confidence"])
def test_speculative_rounds_give_the_plain_tokens_under_page_pressure(cores, kind, budget):
    core = cores(kind, budget)
    requests = _workload(6, seed=5)
    plain = ReferenceEngine.load(core, pages=64)
    expected = [list(plain.generate(r)) for r in requests]
    results, rt = _serve(core, requests, pages=14, width=4)
    assert [tokens for tokens, _ in results] == expected
    assert all(isinstance(terminal, Finished) for _, terminal in results)
    counters = rt.scheduler.counters
    assert counters.launches.get("speculative", 0) == counters.speculative_rounds >= 1
    assert counters.preemptions >= 1  # 14 pages of 4 tokens cannot hold every request at once
    assert 0 <= counters.accepted_drafts <= counters.offered_drafts
    if kind == "same":  # the target drafting for itself: every offered proposal is accepted
        assert counters.accepted_drafts == counters.offered_drafts > 0
    metrics = rt.metrics()
    assert (metrics.speculative_rounds, metrics.offered_drafts, metrics.accepted_drafts) == (
        counters.speculative_rounds, counters.offered_drafts, counters.accepted_drafts)
    assert metrics.available["pages"] == 14  # every page returned


def test_eos_inside_an_accepted_run_ends_the_request_there(cores):
    core = cores("same", None)
    request = GenerationRequest(tuple(range(30, 44)), max_tokens=16, sampling=GREEDY, ignore_eos=True)
    plain = list(ReferenceEngine.load(core, pages=64).generate(request))
    cut = next(k for k in range(2, len(plain)) if plain[k] not in plain[:k] and k % 4 not in (0, 1))
    stopped = GenerationRequest(request.prompt_token_ids, max_tokens=16, sampling=GREEDY,
                                eos_token_ids=(plain[cut],))
    results, rt = _serve(core, [stopped, request], pages=32, width=4)
    assert results[0][0] == plain[:cut + 1] and results[1][0] == plain
    assert results[0][1].output_tokens == cut + 1  # usage counts exactly the emitted tokens


def test_one_token_prompts_speculate_under_two_frames(cores):
    """A one-token prompt's first round is a DECODE. Under two frames (the production executor) a lane
    that would speculate never joins the second frame: there a plain DECODE would keep one of its
    rounds outstanding at every scheduling point, and it would decode plainly to its end."""
    core = cores("perturbed", None)
    rng = random.Random(3)
    requests = [GenerationRequest((rng.randrange(256),), max_tokens=12, sampling=GREEDY, ignore_eos=True)
                for _ in range(6)]
    plain = ReferenceEngine.load(core, pages=64)
    expected = [list(plain.generate(r)) for r in requests]
    for frames in (1, 2):
        results, rt = _serve(core, requests, pages=64, width=4, frames=frames)
        assert [tokens for tokens, _ in results] == expected
        launches = rt.scheduler.counters.launches
        # each cohort's first round decodes the prompt token; every later round speculates
        assert launches.get("decode", 0) <= 2 and launches.get("speculative", 0) >= 6, (frames, launches)


def test_string_stop_requests_decode_at_width_one(cores):
    """The host-stop barrier of string stops is width one: such a request never runs a SPECULATIVE
    round (its worker finds the match before another round), and gives the plain tokens."""
    core = cores("same", None)
    requests = _workload(3, seed=8)
    plain = ReferenceEngine.load(core, pages=64)
    expected = [list(plain.generate(r)) for r in requests]
    engine = ReferenceEngine.load(core, pages=64)
    rt = BatchingRuntime.for_executor(engine.executor, engine.contract, AdmissionLimits(max_active=4, queue_capacity=16),
                                      pages=64, speculative_width=4)
    prepared = [PreparedRequest(f"r{i}", r, observe_tokens=True, host_stop=True) for i, r in enumerate(requests)]
    results = serve_all(rt, prepared)
    assert [tokens for tokens, _ in results] == expected
    assert rt.scheduler.counters.speculative_rounds == 0
    results, rt = _serve(core, requests, pages=64, width=4)  # without string stops they speculate
    assert [tokens for tokens, _ in results] == expected and rt.scheduler.counters.speculative_rounds >= 1
