"""Snapshots through the production executor on CPU (fp32, Triton kernels interpreted): a request
preempted mid-page is snapshotted by a RESTORATION round, released, restored into a fresh private
page at readmission and resumed; the continuation equals the uninterrupted reference run token for
token (greedy and seeded), two rounds in flight where the core allows them, and every restored page
equals the original byte for byte. (Page pressure preempting without recomputation through the
production executor: test_batching_production.py.)"""

from __future__ import annotations

import random

import pytest

from helios.ignition.prepare import prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.limits import AdmissionLimits
from helios.runtime.packing import cache_planes
from tests.engine.test_batching_runtime import OPTIONS
from tests.engine.test_snapshots import drive, random_requests
from tests.production.helpers import CPU_FP32


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


def production_runtime(core, *, pages: int, max_active: int):
    from helios.production.loading import load_native_model, runtime_for
    from helios.runtime.options import RuntimeOptions

    model = load_native_model(core, pages=pages, device="cpu")
    return runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=max_active, queue_capacity=4)))


@CPU_FP32
@pytest.mark.slow
def test_production_resumes_a_snapshotted_request_bit_exactly(core):
    requests, preempt_at = random_requests(random.Random(7), 2)
    # one lane snapshotted mid-page for certain: the first request's endpoint after 2 tokens
    first = requests["r0"]
    preempt_at["r0"] = 2 if (len(first.prompt_token_ids) + 1) % OPTIONS.page_tokens else 3
    reference = ReferenceEngine.load(core, pages=16)
    expected = {request_id: list(reference.generate(r)) for request_id, r in requests.items()}
    runtime = production_runtime(core, pages=32, max_active=2)
    buffers = runtime.executor.buffers
    planes = cache_planes(core.contract)
    tokens, checked, failed = drive(runtime, requests, preempt_at,
                                    lambda plane, page: buffers[plane][page].cpu().numpy().copy(), planes)
    assert tokens == expected and not failed
    counters = runtime.scheduler.counters
    assert counters.snapshots_published == counters.snapshots_restored >= 1
    assert checked == counters.snapshots_restored * len(planes)
    assert counters.recomputed_tokens == 0
