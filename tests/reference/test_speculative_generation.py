"""Speculative generation in the reference runtime is lossless (greedy): on tiny random cores of every
recipe family, with three drafts each (the target itself, a smaller random model with the same
tokenizer, the target with perturbed weights) and both program shapes (rectangular QUERY_LENGTH
programs and confidence programs that allocate within a budget P), speculative decoding emits
exactly the tokens of plain decoding, across page boundaries (4-token pages), with the output
limit, an EOS id and a second EOS id falling inside an accepted run."""

from __future__ import annotations

import pytest

from helios.ignition.prepare import (
    DraftMismatch,
    InvalidPreparationOptions,
    PreparationOptions,
    prepare_checkpoint,
)
from helios.reference.engine import ReferenceEngine
from helios.reference.executor import EngineLoadError
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.fixtures.checkpoints import DRAFT_KINDS, FAMILIES

GREEDY = SamplingParams(temperature=0.0)
PROMPT = list(range(40, 53))


def _options(draft, budget=None, **kw):
    return PreparationOptions(dtype="fp32", draft=draft, batch_capacities=(1, 2), prefill_capacities=(16,),
                              context_tokens=96, page_tokens=4, speculative_widths=(2, 4),
                              speculative_budget=budget, **kw)


@pytest.fixture(scope="module")
def cores(tiny_checkpoint, tiny_draft):
    built = {}

    def core(family, kind, budget):
        key = (family, kind, budget)
        if key not in built:
            built[key] = prepare_checkpoint(tiny_checkpoint(family), _options(tiny_draft(family, kind), budget))
        return built[key]
    return core


def _generate(core, width, **request):
    engine = ReferenceEngine.load(core, speculative_width=width)
    tokens = list(engine.generate(GenerationRequest(PROMPT, sampling=GREEDY, **request)))
    return tokens, engine


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("kind", DRAFT_KINDS)
@pytest.mark.parametrize("budget", [None, 3], ids=["rectangular", "confidence"])
def test_greedy_speculation_equals_plain_decoding(cores, family, kind, budget):
    core = cores(family, kind, budget)
    plain, _ = _generate(core, None, max_tokens=19, ignore_eos=True)
    speculative, engine = _generate(core, 4, max_tokens=19, ignore_eos=True)
    assert speculative == plain
    rounds = engine._sequence - 2  # after the initialization and prefill rounds
    if kind == "same":  # every proposal accepted: a full lane a round (the first token came from prefill)
        rows = 4 if budget is None else budget  # the one-lane confidence program holds P = 3 rows
        assert rounds == -(-(19 - 1) // rows)
    assert rounds <= 19


def test_stops_and_the_output_limit_hold_inside_an_accepted_run(cores):
    core = cores("llama", "same", None)  # every proposal accepted: runs of four tokens
    plain, _ = _generate(core, None, max_tokens=24, ignore_eos=True)
    for limit in (2, 3, 6, 7):  # limits falling inside a run
        assert _generate(core, 4, max_tokens=limit, ignore_eos=True)[0] == plain[:limit]
    cut = next(k for k in range(3, len(plain)) if plain[k] not in plain[:k] and k % 4 != 0)
    for eos in ([plain[cut]], [plain[cut], 5000 % 288]):  # one EOS id, then a second one
        got, _ = _generate(core, 4, max_tokens=24, eos_token_ids=eos)
        first = next(k for k, t in enumerate(plain) if t in eos)
        assert got == plain[:first + 1]


def test_a_width_the_core_did_not_capture_is_refused(cores):
    with pytest.raises(EngineLoadError, match="speculative width 3 is not captured.*captured widths: \\[2, 4\\]"):
        ReferenceEngine.load(cores("qwen2", "small", None), speculative_width=3)


def test_a_draft_with_another_vocabulary_is_refused_in_one_line(tiny_checkpoint, tmp_path):
    from tests.fixtures.checkpoints import make_checkpoint

    other = make_checkpoint("qwen2", tmp_path / "other", overrides={"vocab_size": 300})
    with pytest.raises(DraftMismatch, match="vocab_size 300 differs from the target's 288"):
        prepare_checkpoint(tiny_checkpoint("qwen2"), _options(other))
    foreign = make_checkpoint("llama", tmp_path / "foreign")  # same size, other special tokens
    with pytest.raises(DraftMismatch, match="tokenizer vocabularies differ"):
        prepare_checkpoint(tiny_checkpoint("qwen2"), _options(foreign))


def test_a_draft_needs_the_device_pending_token(tiny_checkpoint, tiny_draft):
    with pytest.raises(InvalidPreparationOptions, match="--draft needs --pending-token device"):
        _options(tiny_draft("qwen2", "small"), pending_token="host")


def test_width_one_programs_draw_nothing_and_keep_the_draft_in_step(tiny_checkpoint, tiny_draft):
    """W = 1: one target row a lane, no proposal drawn (the draft's one pass only writes its history):
    the tokens are plain decoding's, as the wider program's are."""
    core = prepare_checkpoint(tiny_checkpoint("qwen3"), PreparationOptions(
        dtype="fp32", draft=tiny_draft("qwen3", "same"), batch_capacities=(1, 2), prefill_capacities=(16,),
        context_tokens=96, page_tokens=4, speculative_widths=(1, 4)))
    graph = next(g for g in core.contract.model.graphs if g.name == "speculative_b1_w1")
    assert (graph.speculative.draft_tokens, graph.speculative.verify_tokens) == (0, 1)
    plain, _ = _generate(core, None, max_tokens=9, ignore_eos=True)
    narrow, engine = _generate(core, 1, max_tokens=9, ignore_eos=True)
    assert narrow == plain and engine.speculative_counts["rounds"] == 8
    assert engine.speculative_counts["offered"] == engine.speculative_counts["accepted"] == 0
    wide, _ = _generate(core, 4, max_tokens=9, ignore_eos=True)
    assert wide == plain
