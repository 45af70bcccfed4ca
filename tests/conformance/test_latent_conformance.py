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


def test_a_latent_attention_without_its_rotary_term_is_caught_at_the_operators_level(latent_core, monkeypatch):
    """A production lowering that drops the rotary key's share of the scores: every latent_attention
    case diverges on its output."""
    from helios.production.lowering import latent, operators

    def without_rotary_scores(c, op):
        run, q_rope = latent.lower_latent_attention(c, op), c.t(op.inputs[1])

        def mutated() -> None:
            q_rope.zero_()
            run()
        return mutated

    monkeypatch.setitem(operators.LOWERINGS, "latent_attention", without_rotary_scores)
    report = run(latent_core, ("operators",), operators=("latent_attention",))
    level = report.level("operators")
    assert level.cases and len(level.divergences) == len(level.cases), report.table()
    assert all(d.field.startswith("out[") for d in level.divergences)
