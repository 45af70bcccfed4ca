"""`helios conform` over the Engram test recipe's core (docs/engram.md): a chunked prompt and a short
one decoding together (prefill, mixed and decode rounds, each staged by the host gatherer, two rounds
in flight) pass the trace audit, which replays every production round on the reference from the
lanes it recorded (their history tokens included), and the end-to-end comparison."""

from __future__ import annotations

from tests.conformance.helpers import run, workload
from tests.conformance.test_conform_passes import Observed

ENGRAM = workload("engram",
                  {"name": "long", "prompt": [5, 9, 17, 3, 44, 12, 7, 7, 9, 30, 2, 5, 9], "max_tokens": 4,
                   "temperature": 0},
                  {"name": "short", "prompt": [61, 62, 63, 61, 62], "max_tokens": 4, "temperature": 0.8, "seed": 3})


def test_the_engram_core_passes_the_trace_audit_and_end_to_end(engram_core):
    core, _ = engram_core
    production = Observed()
    report = run(core, ("trace", "e2e"), ENGRAM, production=production)
    assert report.verdict == "pass", report.table()
    records = [record for sink in production.sinks for record in sink.records]
    assert any(lane.history for record in records for lane in record.lanes)  # recorded, and replayed with them


def test_a_production_that_ignores_the_staged_rows_is_caught(engram_core, monkeypatch):
    from helios.production.lowering import operators

    def zero_rows(c, op):
        out = c.t(op.outputs[0])
        return lambda: out.zero_()

    monkeypatch.setitem(operators.LOWERINGS, "engram_gather", zero_rows)
    core, _ = engram_core
    report = run(core, ("trace",), ENGRAM)
    divergence = report.level("trace").divergences[0]
    assert divergence.field == "cache.layer1.key", report.table()  # the layer the Engram sum feeds
