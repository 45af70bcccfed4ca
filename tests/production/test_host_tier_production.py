"""The host tier through the production executor on CPU (fp32, Triton kernels interpreted): a
12-page device cache, long prompts re-sent after later ones evicted their checkpoints; the evicted
pages are copied into the host tier's tensors and copied back on the re-send's prefix hit, and the
tokens equal the reference batching run without a host tier. The run is recorded as a conformance
trace and the audit replays it, host-tier copies included, and passes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from helios.ignition.prepare import prepare_checkpoint
from helios.proto import manifest_pb2
from helios.runtime.host_cache import GIB
from helios.runtime.limits import AdmissionLimits
from tests.engine.test_batching_runtime import OPTIONS
from tests.engine.test_host_tier import PAGES, host_runtime, resent_long_prompts, run


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="an fp32 CPU test (interpreted kernels, device=\"cpu\"); on a GPU "
                    "tests/production/test_gpu_snapshots.py checks the host tier's readmissions in bf16")
def test_production_readmits_resent_prefixes_from_the_host_tier(core):
    from conformance.audit import audit_trace
    from conformance.trace import TraceList, header_for, recorder_for
    from helios.production.loading import load_native_model, runtime_for
    from helios.runtime.options import RuntimeOptions

    requests = resent_long_prompts(11, count=2)
    expected = run(host_runtime(core, 0), requests)
    reference = host_runtime(core, 64)  # the same decisions over the reference executor's host tier
    assert run(reference, requests) == expected
    page_bytes = sum(int(np.prod(b.shape[1:])) * 4 for b in core.manifest.buffers
                     if b.role == manifest_pb2.BUFFER_ROLE_CACHE)  # fp32 planes
    model = load_native_model(core, pages=PAGES, device="cpu", host_cache_gib=64 * page_bytes / GIB)
    assert model.executor.host_pages == 64 and model.executor.page_bytes == page_bytes
    sink = TraceList()
    record = lambda executor, pages: recorder_for(executor, core.contract, core.manifest, sink)  # noqa: E731
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=16),
                                                wrap_executor=record))
    assert run(runtime, requests) == expected
    copies = [copy for r in sink.records for copy in r.copies]
    assert any(c.readmit for c in copies) and any(not c.readmit for c in copies)
    case = audit_trace(core, header_for(core.contract, PAGES), sink.records, case="host_tier")
    assert case.verdict == "pass", case
    m = runtime.metrics()
    r = reference.metrics()
    assert (m.host_offloaded_pages, m.host_readmitted_pages) == (r.host_offloaded_pages, r.host_readmitted_pages)
    assert m.host_readmitted_pages > 0 and m.host_offloaded_pages >= m.host_readmitted_pages
    assert 0 < m.host_bytes_in_use <= m.host_bytes_capacity == 64 * page_bytes
