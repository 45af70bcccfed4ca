"""The host tier through the production executor on CPU (fp32, Triton kernels interpreted): a
12-page device cache, long prompts re-sent after later ones evicted their checkpoints; the evicted
pages are copied into the host tier's tensors and copied back on the re-send's prefix hit, and the
tokens equal the reference batching run without a host tier."""

from __future__ import annotations

import numpy as np
import pytest

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
def test_production_readmits_resent_prefixes_from_the_host_tier(core):
    from helios.production.loading import load_native_model, runtime_for
    from helios.runtime.options import RuntimeOptions

    requests = resent_long_prompts(11)
    expected = run(host_runtime(core, 0), requests)
    page_bytes = sum(int(np.prod(b.shape[1:])) * 4 for b in core.manifest.buffers
                     if b.role == manifest_pb2.BUFFER_ROLE_CACHE)  # fp32 planes
    model = load_native_model(core, pages=PAGES, device="cpu", host_cache_gib=64 * page_bytes / GIB)
    assert model.executor.host_pages == 64 and model.executor.page_bytes == page_bytes
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=16)))
    assert run(runtime, requests) == expected
    m = runtime.metrics()
    assert m.host_readmitted_pages == 3 * 7 and m.host_offloaded_pages >= 3 * 7
    assert 0 < m.host_bytes_in_use <= m.host_bytes_capacity == 64 * page_bytes
