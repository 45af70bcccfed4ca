"""`helios conform` on speculative cores: the trace audit compares each SPECULATIVE round's offers
(the allocation), accepted drafts, emitted ids, consumed endpoint, draft cursor and state with the
reference replaying production's very lanes, and the end-to-end level compares tokens; both pass on
a rectangular and on a confidence core. Three speculative mutations of production are each caught
and named: an allocation tie broken toward the higher slot (at the operators level, whose case ties exactly), a draft cursor one past the endpoint,
and a commit one token too far."""

from __future__ import annotations

import pytest
import torch

from helios.production.lowering import operators as lowering
from tests.conformance.conftest import CAPACITIES
from tests.conformance.helpers import only_divergence, run, workload

pytestmark = pytest.mark.slow

TWINS = workload("twins", {"name": "a", "prompt": [9, 4, 7, 1, 5], "max_tokens": 6, "temperature": 0},
                 {"name": "b", "prompt": [2, 8, 6, 3], "max_tokens": 6, "temperature": 0})
MIXED = workload("mixed",
                 {"name": "greedy", "prompt": "The quick fox", "max_tokens": 7, "temperature": 0},
                 {"name": "seeded", "prompt": "The quick cat", "max_tokens": 7, "temperature": 0.9, "top_k": 40,
                  "seed": 7},
                 {"name": "stops", "prompt": [5, 17, 99], "max_tokens": 6, "temperature": 1.0, "seed": 3,
                  "stop_token_ids": list(range(128, 256))},
                 pages=14)


@pytest.fixture(scope="module")
def cores(tiny_checkpoint, tiny_draft):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    def core(budget):
        return prepare_checkpoint(tiny_checkpoint("llama"), PreparationOptions(
            **CAPACITIES, draft=tiny_draft("llama", "same"), speculative_widths=(4,), speculative_budget=budget))
    return {"rectangular": core(None), "confidence": core(3)}


class Observed:
    def __init__(self) -> None:
        from conformance.runner import Production
        from tests.conformance.conftest import DEVICE

        self.inner = Production(DEVICE)
        self.sinks: list = []

    def runtime(self, core, workload, sink):
        self.sinks.append(sink)
        return self.inner.runtime(core, workload, sink)


@pytest.mark.parametrize("shape", ["rectangular", "confidence"])
def test_trace_and_e2e_pass_on_a_speculative_core(cores, shape):
    production = Observed()
    report = run(cores[shape], ("trace", "e2e"), MIXED, production=production)
    assert report.verdict == "pass", report.table()
    records = [r for sink in production.sinks for r in sink.records]
    speculative = [r for r in records if r.graph.startswith("speculative")]
    assert speculative and any(row.accepted_drafts > 0 for r in speculative for row in r.rows)


def test_the_trace_audit_checks_the_rounds_adaptive_choice_ran(cores):
    """Under adaptive choice (round costs measured at load, each cohort's program chosen from them and
    the acceptance observed) the reference replays whichever rounds production chose, and agrees."""
    from conformance.runner import Production
    from tests.conformance.conftest import DEVICE

    production = Observed()
    production.inner = Production(DEVICE, adaptive_speculation=True)
    report = run(cores["rectangular"], ("trace",), TWINS, production=production)
    assert report.verdict == "pass", report.table()
    graphs = {r.graph for sink in production.sinks for r in sink.records}
    assert any(g.startswith(("speculative", "decode")) for g in graphs), graphs


def test_a_tie_broken_toward_the_higher_slot_is_caught(cores, monkeypatch):
    original = lowering.LOWERINGS["speculative_allocate"]

    def flipped(c, op):  # the allocation sees slots in reverse order: ties go to the higher slot
        lane_order = c.t(op.inputs[2])
        launch = original(c, op)

        def run_flipped():
            saved = lane_order.clone()
            lane_order.copy_(torch.where(lane_order >= 0, 1000 - lane_order, lane_order))
            launch()
            lane_order.copy_(saved)
        return run_flipped

    monkeypatch.setitem(lowering.LOWERINGS, "speculative_allocate", flipped)
    # the operator case's quantized confidences tie exactly (conformance/operators.py)
    found = only_divergence(run(cores["confidence"], ("operators",), operators=("speculative_allocate",)),
                            "operators")
    assert found.case.startswith("speculative_allocate") and found.field.startswith("lengths"), found


def test_a_draft_cursor_one_past_the_endpoint_is_caught(cores, monkeypatch):
    original = lowering.LOWERINGS["scatter"]

    def shifted(c, op):
        if op.inputs[0] != "completion.draft_cursor":
            return original(c, op)
        out, x, index = (c.t(n) for n in op.inputs)

        def run_shifted():  # no boolean indexing: a CUDA graph captures it (valid indices are distinct)
            valid = index >= 0
            safe = torch.where(valid, index, 0).long()
            out.index_put_((safe,), torch.where(valid, x + 1 - out[safe], 0), accumulate=True)
        return run_shifted

    monkeypatch.setitem(lowering.LOWERINGS, "scatter", shifted)
    found = only_divergence(run(cores["rectangular"], ("trace",), TWINS), "trace")
    assert found.field == "draft_cursor", found


def test_a_commit_one_token_too_far_is_caught(cores, monkeypatch):
    original = lowering.LOWERINGS["speculative_commit"]

    def too_far(c, op):
        launch = original(c, op)
        _, emitted, endpoint = (c.t(n) for n in op.outputs)

        def run_too_far():
            launch()
            endpoint.add_((emitted > 0).to(endpoint.dtype))
        return run_too_far

    monkeypatch.setitem(lowering.LOWERINGS, "speculative_commit", too_far)
    found = only_divergence(run(cores["rectangular"], ("trace",), TWINS), "trace")
    assert found.field == "consumed_endpoint", found
