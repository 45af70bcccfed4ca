"""GPU only (bf16): snapshots and the host tier through the production executor on CUDA.

- A request snapshotted mid-page (and on page boundaries), released and restored: every restored page
  equals, byte for byte, the page its snapshot round copied, nothing is recomputed, and the
  continuation equals the uninterrupted run of the same request on the same executor token for
  token, greedy and seeded (one request at a time, so both runs replay the same graphs over the same
  bytes; the CPU tests compare fp32 with the reference instead).
- Re-sent prompts on a device cache forced small: every checkpoint readmitted from the pinned host
  tier equals, byte for byte, the page offloaded into its host page, and the tokens equal the run
  whose re-sends hit the device's own cache (the same reuse boundary, so the same prefill graphs).
"""

from __future__ import annotations

import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from helios.ignition.prepare import prepare_checkpoint
from helios.runtime.host_cache import GIB
from helios.runtime.limits import AdmissionLimits
from helios.runtime.packing import cache_planes, continuation_planes
from tests.engine.test_batching_runtime import OPTIONS
from tests.engine.test_host_tier import PAGES, resent_long_prompts, run
from tests.engine.test_snapshots import drive, random_requests

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), replace(OPTIONS, dtype="bf16"))


def cuda_runtime(core, *, pages: int, host_pages: int = 0, max_active: int = 1):
    from helios.production.loading import load_native_model, runtime_for
    from helios.production.native_model import manifest_page_bytes
    from helios.runtime.options import RuntimeOptions

    model = load_native_model(core, pages=pages, device="cuda",
                              host_cache_gib=host_pages * manifest_page_bytes(core.manifest) / GIB)
    assert model.executor.host_pages == host_pages
    return runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=max_active, queue_capacity=16)))


def page_bytes(runtime, plane: str, page: int) -> np.ndarray:
    """The raw bytes of one page of a plane (a cache page, or a continuation row of a continuation
    plane; bf16 has no NumPy dtype: its bytes are compared)."""
    torch.cuda.synchronize()
    return runtime.executor.buffers[plane][page].contiguous().view(torch.uint8).cpu().numpy().copy()


@pytest.mark.parametrize("seed", [4, 5])
def test_bf16_restored_pages_are_byte_identical_and_the_continuation_is_the_uninterrupted_run(core, seed):
    requests, preempt_at = random_requests(random.Random(seed), 4)
    first = requests["r0"]  # one snapshot mid-page for certain
    preempt_at["r0"] = 2 if (len(first.prompt_token_ids) + 1) % OPTIONS.page_tokens else 3
    planes = cache_planes(core.contract)
    uninterrupted = cuda_runtime(core, pages=32)
    assert all(uninterrupted.executor.buffers[plane].dtype == torch.bfloat16 for plane in planes)
    expected, _, failed = drive(uninterrupted, requests, {},
                                lambda plane, page: page_bytes(uninterrupted, plane, page), planes)
    assert not failed and all(len(expected[r]) == requests[r].max_tokens for r in requests)
    runtime = cuda_runtime(core, pages=32)
    tokens, checked, failed = drive(runtime, requests, preempt_at,
                                    lambda plane, page: page_bytes(runtime, plane, page), planes)
    assert tokens == expected and not failed
    counters = runtime.scheduler.counters
    assert counters.preemptions == counters.readmissions == len(requests)
    # (a request asked to be preempted drains its rounds in flight first: its endpoint falls where it falls)
    assert counters.snapshots_published == counters.snapshots_restored >= 1
    assert checked == counters.snapshots_restored * len(planes)  # every restored page of every plane, byte for byte
    assert counters.recomputed_tokens == 0


def test_bf16_host_readmissions_are_byte_identical_pages(core):
    requests = resent_long_prompts(11)  # the CPU test's prompts: 7 pages readmitted per re-send
    expected = run(cuda_runtime(core, pages=64), requests)  # the re-sends hit the device's own cache
    runtime = cuda_runtime(core, pages=PAGES, host_pages=64)
    planes = cache_planes(core.contract)
    rows = continuation_planes(core.contract)  # a published continuation evicted for its row is offloaded too
    offloaded: dict[int, list[np.ndarray]] = {}  # host page -> the bytes of the page copied into it
    compared = []
    submit = runtime.executor.submit

    def checked(plan):
        due = {}  # device page -> the bytes its readmission must give it (copies in plan order)
        for copy in plan.page_copies:
            if copy.readmit:
                due[copy.page] = offloaded.pop(copy.host_page)
            else:  # an unreferenced checkpoint (or continuation row) whose rounds are fenced: its bytes are final
                offloaded[copy.host_page] = [page_bytes(runtime, rows[plane] if copy.continuation else plane, copy.page)
                                             for plane in planes]
        submit(plan)
        for page, before in due.items():  # no round writes a published page: it holds what the copy put
            for plane, original in zip(planes, before, strict=True):
                assert page_bytes(runtime, plane, page).tobytes() == original.tobytes(), (plane, page)
            compared.append(page)

    runtime.executor.submit = checked
    assert run(runtime, requests) == expected
    m = runtime.metrics()
    assert m.host_readmitted_pages == len(compared) == 3 * 7 and m.host_offloaded_pages >= m.host_readmitted_pages
    assert runtime.scheduler.counters.continuations_offloaded > 0  # six publications on four rows: rows too
