"""`helios conform` over a latent core (dense DeepSeek-V3, tests/fixtures/checkpoints.py): the
generated workloads (chunked prompts, stops, grammar, page pressure, prefix reuse, snapshots; batched
decode, mixed and restoration rounds in production) pass the trace audit, which reads every latent
and rotary-key record the rounds write, and the end-to-end comparison."""

from __future__ import annotations

import pytest

from tests.conformance.conftest import CAPACITIES
from tests.conformance.helpers import run
from tests.conformance.test_conform_passes import Observed

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def latent_core(tiny_checkpoint):
    from helios.ignition.prepare import PreparationOptions, prepare_checkpoint

    return prepare_checkpoint(tiny_checkpoint("deepseek_v3"), PreparationOptions(**CAPACITIES))


def test_the_generated_workloads_pass_on_a_latent_core(latent_core):
    from conformance.coverage import RESTORE, REUSE

    production = Observed()
    report = run(latent_core, ("trace", "e2e"), production=production)
    assert report.verdict == "pass", report.table()
    rows = {line.split("  ")[0]: line for line in report.table().splitlines()}
    for mechanism in (REUSE, RESTORE):  # the latent pages are reused and snapshotted as key/value pages are
        assert "exercised" in rows[mechanism] and "not supported" not in rows[mechanism], rows[mechanism]
    graphs = {record.graph for sink in production.sinks for record in sink.records}
    assert {"decode_b2", "mixed_b2_p9", "restoration_b1"} <= graphs, graphs
