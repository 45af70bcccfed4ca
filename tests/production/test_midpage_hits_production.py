"""Mid-page prefix hits through the production executor on CPU (fp32, Triton kernels interpreted): the
first turn's partial last page is published as a continuation after its fence; the second turn,
re-sending the whole first turn and more, restores it into a private page and starts at the endpoint;
greedy and seeded tokens equal the reference batching run without the hit, and the recorded trace
(the publication's snapshot lane and the restore lane included) passes the audit."""

from __future__ import annotations

import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.runtime.limits import AdmissionLimits
from tests.engine.test_batching_runtime import OPTIONS
from tests.engine.test_midpage_hits import GREEDY, SEEDED, conversation, one_at_a_time
from tests.engine.test_snapshots import reference_runtime
from tests.production.helpers import CPU_FP32


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


@CPU_FP32
@pytest.mark.slow
@pytest.mark.parametrize("sampling", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_production_restores_a_published_partial_page_bit_exactly(core, sampling):
    from conformance.audit import audit_trace
    from conformance.trace import TraceList, header_for, recorder_for
    from helios.production.loading import load_native_model, runtime_for
    from helios.runtime.options import RuntimeOptions

    first = conversation(sampling)
    (first_tokens,) = one_at_a_time(reference_runtime(core, pages=32), [first])
    second = conversation(sampling, first_tokens)
    (expected,) = one_at_a_time(reference_runtime(core, pages=32), [second])
    sink = TraceList()
    record = lambda executor, pages: recorder_for(executor, core.contract, core.manifest, sink)  # noqa: E731
    model = load_native_model(core, pages=32, device="cpu", host_cache_gib=0)
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=4), wrap_executor=record))
    assert one_at_a_time(runtime, [first, second]) == [first_tokens, expected]
    m = runtime.metrics()
    assert m.continuation_hits == 1 and m.snapshots_restored == 1
    lanes = [lane for r in sink.records for lane in r.lanes]
    assert any(lane.snapshot_destination >= 0 for lane in lanes) and any(lane.restore_source >= 0 for lane in lanes)
    case = audit_trace(core, header_for(core.contract, 32), sink.records, case="midpage")
    assert case.verdict == "pass", case
