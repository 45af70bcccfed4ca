"""`helios conform --history-drafting`: both runtimes' speculative rounds carry proposals copied from
each request's own tokens; the trace audit replays production's very lanes (their copied proposals
included, through the CANDIDATE_IDS and CANDIDATE_COUNT bindings, and a constrained request's
per-position grammar masks, CANDIDATE_GRAMMAR_MASKS) on the reference and the end-to-end level
compares tokens, on a confidence core whose draft (a smaller random model) the target almost never
agrees with, so the accepted proposals are the copied ones; production's per-position masks left
unapplied are caught by the trace audit. (That greedy tokens
with history drafting equal plain decoding's is tests/reference/test_history_drafting_generation.py's.)"""

from __future__ import annotations

import pytest

from conformance import coverage as c
from conformance.generate import generated_workloads
from conformance.runner import ConformOptions, Production, conform
from tests.conformance.conftest import CAPACITIES, DEVICE
from tests.conformance.helpers import workload

pytestmark = pytest.mark.slow

REPEATED = [40, 41, 42, 43, 44] * 2 + [40, 41]
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
          "required": ["a"], "additionalProperties": False}
HISTORY = workload("history",
                   {"name": "repeated", "prompt": REPEATED, "max_tokens": 14, "temperature": 0},
                   {"name": "seeded", "prompt": REPEATED[:7], "max_tokens": 8, "temperature": 0.9, "seed": 5})
CONSTRAINED = workload("constrained",
                       {"name": "json", "messages": [{"role": "user", "content": 'say {"a":1} {"a":2}'}],
                        "max_tokens": 12, "temperature": 0,
                        "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}})


class Observed:
    def __init__(self) -> None:
        self.inner = Production(DEVICE, history_drafting=True)
        self.sinks: list = []

    def runtime(self, core, workload, sink):
        self.sinks.append(sink)
        return self.inner.runtime(core, workload, sink)


@pytest.fixture(scope="module")
def core(tiny_checkpoint, tiny_draft):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    # a context of 64: the constrained request's chat prompt (its envelope alone is 23 tokens) and answer
    options = {**CAPACITIES, "context_tokens": 64}
    return prepare_checkpoint(tiny_checkpoint("llama"), PreparationOptions(
        **options, draft=tiny_draft("llama", "small"), speculative_widths=(4,), speculative_budget=3))


def test_trace_and_e2e_pass_with_history_drafting(core):
    production = Observed()
    report = conform(core, ConformOptions(levels=("trace", "e2e"), device=DEVICE, extra_workloads=(HISTORY, CONSTRAINED),
                                          production=production, history_drafting=True))
    assert report.verdict == "pass", report.table()
    records = [r for sink in production.sinks for r in sink.records if r.graph.startswith("speculative")]
    copied = [(lane, row) for r in records for lane, row in zip(r.lanes, r.rows, strict=True) if lane.copied]
    assert copied and any(row.accepted_drafts > 0 for _, row in copied)
    constrained = [(lane, row) for lane, row in copied if lane.candidate_masks is not None]
    assert constrained and any(row.accepted_drafts > 0 for _, row in constrained)  # audited with its masks


def test_the_generated_geometry_workload_reaches_speculative_rounds_and_copied_proposals(core):
    """The coverage table's speculative-round and copied-proposal rows (required of generated workloads
    on a draft core with history drafting) are reached at both levels by the generated `geometry`
    workload's `copying` request (the other generated workloads left out: coverage not required here)."""
    report = conform(core, ConformOptions(levels=("trace", "e2e"), device=DEVICE, history_drafting=True,
                                          workload_names=("geometry",), require_coverage=False))
    assert report.verdict == "pass", report.table()
    for level in ("trace", "e2e"):
        assert report.coverage.state(c.SPECULATIVE, level) == c.EXERCISED, report.table()
        assert report.coverage.state(c.COPIED, level) == c.EXERCISED, report.table()


def test_copied_proposals_are_required_only_of_a_run_with_history_drafting(core):
    from conformance.generate import Geometry

    geometry = Geometry.of(core)
    assert geometry.speculative and c.SPECULATIVE not in geometry.unsupported()
    assert "without history drafting" in geometry.unsupported()[c.COPIED]
    assert c.COPIED not in geometry.unsupported(history_drafting=True)
    assert "copying" in {r.name for r in generated_workloads(core, geometry)[0].requests}


def test_history_drafting_on_a_core_without_copied_inputs_fails_in_one_line(tiny_checkpoint):
    from helios.contract.errors import HistoryDraftingUnsupported
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    plain = prepare_checkpoint(tiny_checkpoint("llama"), PreparationOptions(**CAPACITIES))
    with pytest.raises(HistoryDraftingUnsupported, match="history drafting requires enabled learned speculation"):
        conform(plain, ConformOptions(levels=("e2e",), device=DEVICE, extra_workloads=(HISTORY,),
                                      history_drafting=True))


def test_per_position_masks_left_unapplied_in_production_are_caught(core, monkeypatch):
    """Production's `speculative_grammar_mask` launching nothing: the trace audit, replaying the
    constrained request's speculative lanes with their masks on the reference, names the round."""
    from helios.production.lowering import operators as lowering

    monkeypatch.setitem(lowering.LOWERINGS, "speculative_grammar_mask", lambda c, op: lambda: None)
    report = conform(core, ConformOptions(levels=("trace",), device=DEVICE, extra_workloads=(CONSTRAINED,),
                                          production=Production(DEVICE, history_drafting=True),
                                          history_drafting=True))
    found = report.level("trace").divergences
    assert found and found[0].field in ("sampled_ids", "accepted_drafts", "emitted", "consumed_endpoint"), \
        report.table()
