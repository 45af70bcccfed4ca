"""History drafting in the reference runtime: speculative rounds that also carry proposals copied
from the request's own tokens give exactly the tokens of plain greedy decoding, on tiny random cores
of every recipe family and both program shapes, with a draft that almost never agrees with the
target (a smaller random model), so what is accepted is mostly what history drafting copied; a
core without learned speculation refuses the option in one line."""

from __future__ import annotations

import pytest

from helios.contract.errors import HistoryDraftingUnsupported
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import InvalidRuntimeOptions, RuntimeOptions
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.fixtures.checkpoints import FAMILIES

GREEDY = SamplingParams(temperature=0.0)
PROMPT = [40, 41, 42, 43, 44] * 2 + [40, 41]  # a repeated phrase: its continuation is in the prompt


def _options(draft=None, budget=None):
    speculative = {"draft": draft, "speculative_widths": (2, 4), "speculative_budget": budget} if draft else {}
    return PreparationOptions(dtype="fp32", batch_capacities=(1, 2), prefill_capacities=(16,), context_tokens=96,
                              page_tokens=4, **speculative)


@pytest.fixture(scope="module")
def cores(tiny_checkpoint, tiny_draft):
    built = {}

    def core(family, budget):
        if (family, budget) not in built:
            built[family, budget] = prepare_checkpoint(tiny_checkpoint(family),
                                                       _options(tiny_draft(family, "small"), budget))
        return built[family, budget]
    return core


def _generate(core, tokens=24, **engine):
    runner = ReferenceEngine.load(core, **engine)
    return list(runner.generate(GenerationRequest(PROMPT, sampling=GREEDY, max_tokens=tokens, ignore_eos=True))), runner


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("budget", [None, 3], ids=["rectangular", "confidence"])
def test_history_drafting_gives_the_plain_greedy_tokens(cores, family, budget):
    core = cores(family, budget)
    plain, _ = _generate(core)
    drafted, _ = _generate(core, speculative_width=4)
    copied, engine = _generate(core, speculative_width=4, history_drafting=True)
    assert copied == plain and drafted == plain
    counts = engine.speculative_counts
    assert 0 <= counts["copied_accepted"] <= counts["copied_offered"] <= counts["offered"]
    assert counts["copied_accepted"] <= counts["accepted"]


def test_copied_proposals_are_accepted_where_the_draft_fails(cores):
    """The llama core's greedy output repeats itself (measured: 9 of its copied proposals accepted in
    48 tokens, the small draft's none; it repeats two-token runs from about its 20th token, and an
    unconstrained request copies only after two matching tokens): fewer rounds for the same tokens."""
    core = cores("llama", None)
    _, drafted = _generate(core, 48, speculative_width=4)
    _, copied = _generate(core, 48, speculative_width=4, history_drafting=True)
    assert drafted.speculative_counts["accepted"] == 0
    assert copied.speculative_counts["copied_accepted"] > 0
    assert copied.speculative_counts["rounds"] < drafted.speculative_counts["rounds"]


def test_history_drafting_needs_learned_speculation(cores, tiny_checkpoint):
    with pytest.raises(HistoryDraftingUnsupported, match="requires enabled learned speculation"):
        ReferenceEngine.load(cores("qwen3", None), history_drafting=True)  # plain decoding selected
    plain_core = prepare_checkpoint(tiny_checkpoint("qwen3"), _options())
    with pytest.raises(HistoryDraftingUnsupported, match="requires enabled learned speculation"):
        ReferenceEngine.load(plain_core, history_drafting=True)
    with pytest.raises(InvalidRuntimeOptions, match="--history-drafting needs learned speculation"):
        RuntimeOptions(AdmissionLimits(max_active=1), speculation=False, history_drafting=True)


def test_the_copied_proposal_metrics_move(cores):
    """Through the reference runtime's factory and /metrics' collector: the copied proposals offered
    and accepted count up from 0 (the llama core's repeated output accepts some)."""
    from helios.reference import load_runtime
    from helios.runtime.interface import PreparedRequest
    from helios.server.metrics import HeliosCollector, ServerCounters
    from tests.runtime.streams import serve_all

    runtime = load_runtime(cores("llama", None), RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=1),
                                                                speculative_width=4, history_drafting=True))

    def exported() -> dict[str, float]:
        families = HeliosCollector(runtime.metrics, ServerCounters(), lambda: 0, 1).collect()
        return {f.name: f.samples[0].value for f in families
                if f.name in ("helios_speculative_copied_offered", "helios_speculative_copied_accepted")}

    assert exported() == {"helios_speculative_copied_offered": 0, "helios_speculative_copied_accepted": 0}
    request = GenerationRequest(PROMPT, sampling=GREEDY, max_tokens=48, ignore_eos=True)
    serve_all(runtime, [PreparedRequest("r0", request, observe_tokens=True)])
    after = exported()
    assert 0 < after["helios_speculative_copied_accepted"] <= after["helios_speculative_copied_offered"]
