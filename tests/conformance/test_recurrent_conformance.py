"""`helios conform` over a hybrid core with recurrent state (LFM2, tests/fixtures/checkpoints.py): the
generated workloads (chunked prompts, stops, grammar, page pressure, snapshots; batched decode,
mixed and restoration rounds in production) pass the trace audit, whose state rows include every
convolution layer's live state row, and the end-to-end comparison;
prefix reuse is reported unsupported by the core; and a restore that leaves the recurrent state row
as the fresh slot held it is caught at the trace level, naming the state plane."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import CAPACITIES
from tests.conformance.helpers import only_divergence, run
from tests.conformance.test_conform_passes import Observed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hybrid_core(tiny_checkpoint):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    return prepare_checkpoint(tiny_checkpoint("lfm2"), PreparationOptions(**CAPACITIES))


def test_the_generated_workloads_pass_on_a_recurrent_core(hybrid_core):
    from conformance.coverage import RESTORE, REUSE

    production = Observed()
    report = run(hybrid_core, ("trace", "e2e"), production=production)
    assert report.verdict == "pass", report.table()
    coverage = report.table()
    assert "recurrent state" in coverage and REUSE in coverage and RESTORE in coverage
    # production ran batched decode, mixed and restoration rounds (compared with the reference)
    graphs = {record.graph for sink in production.sinks for record in sink.records}
    assert {"decode_b2", "mixed_b2_p9", "restoration_b1"} <= graphs, graphs


def test_a_restore_that_skips_the_recurrent_state_is_caught_naming_its_plane(hybrid_core, monkeypatch):
    from conformance.generate import Geometry, _snapshot
    from helios.production.lowering import operators

    workload = _snapshot(hybrid_core, Geometry.of(hybrid_core))
    assert workload is not None
    monkeypatch.setitem(operators.LOWERINGS, "state_row_copy", lambda c, op: lambda: None)
    report = run(hybrid_core, ("trace",), workload)
    found = only_divergence(report, "trace")
    assert found.field.startswith("state.layer") and found.field.endswith(".state"), report.table()
