"""The production executor's host-tier copies (`NativeExecutor._copy_pages`) on CPU, checked byte for
byte against applying the plan's copies one page at a time in plan order (the reference
executor's definition): scattered device pages and host pages, continuation rows, offloads and
readmissions interleaved with host pages reused within a round, chunks larger than the device
staging (forced small), with staging of its own and without."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from helios.production.executor import COPY_STAGING_BYTES, NativeExecutor, copy_staging_pages
from helios.runtime.rounds import PageCopy, RoundPlan
from tests.engine.test_host_tier import random_copies

PAGES, ROWS, HOSTS = 12, 3, 10
# two planes of different page shapes and dtypes, each with its continuation plane
SHAPES = {"k0": ((2, 3), torch.float32), "v0": ((4,), torch.bfloat16)}


def executor(staging_pages: int | None, *, separate: bool = False) -> NativeExecutor:
    buffers = {}
    generator = torch.Generator().manual_seed(0)
    for name, (shape, dtype) in SHAPES.items():
        buffers[name] = torch.randn((PAGES, *shape), generator=generator).to(dtype)
        buffers[f"{name}.rows"] = torch.randn((ROWS, *shape), generator=generator).to(dtype)
    ex = NativeExecutor({}, buffers, {}, device=torch.device("cpu"), capture=None, separate_staging=separate,
                        cache_buffers=tuple(SHAPES), host_pages=HOSTS,
                        continuation_buffers={name: f"{name}.rows" for name in SHAPES}, staging_pages=staging_pages)
    for host in ex.host.values():  # the tier's pages hold something before any offload
        host.copy_(torch.randn(host.shape, generator=generator).to(host.dtype))
    return ex


def plan(copies) -> RoundPlan:
    return RoundPlan(sequence=1, frame=0, graph="g", operation=0, lanes=(), request_ids=(), page_table_updates=(),
                     constrained_lanes=0, outstanding=1, page_copies=tuple(copies))


def state(ex: NativeExecutor) -> dict[str, np.ndarray]:
    """Every byte of every plane, continuation plane and host page."""
    out = {name: t.view(torch.uint8).numpy().copy() for name, t in ex.buffers.items()}
    out.update({f"host.{name}": t.view(torch.uint8).numpy().copy() for name, t in ex.host.items()})
    return out


def one_by_one(ex: NativeExecutor, copies) -> dict[str, np.ndarray]:
    """The definition: each copy in plan order, one page of one plane at a time, on the state's bytes."""
    out = state(ex)
    for c in copies:
        for name in SHAPES:
            host, plane = out[f"host.{name}"], out[name]
            if c.readmit:
                plane[c.page] = host[c.host_page]
            else:
                host[c.host_page] = (out[f"{name}.rows"] if c.continuation else plane)[c.page]
    return out


def check(ex: NativeExecutor, copies) -> None:
    expected = one_by_one(ex, copies)
    ex._copy_pages(plan(copies), gpu=False)
    got = state(ex)
    for name, value in expected.items():
        assert np.array_equal(got[name], value), (name, copies)


@pytest.mark.parametrize("separate", [False, True])
def test_random_copies_through_small_staging_equal_the_copies_one_by_one(separate):
    rng = random.Random(7)
    for _ in range(150):
        ex = executor(rng.choice((1, 2, 3, 5, HOSTS)), separate=separate)
        check(ex, random_copies(rng, rng.randrange(1, 20), pages=PAGES, rows=ROWS, hosts=HOSTS))


def test_a_readmitted_prefix_over_scattered_pages_goes_in_chunks_of_the_staging():
    """Each readmission takes a scattered device page whose checkpoint it offloads first, and each
    offload after the first reuses the host page the readmission before it read: 2 x 5 copies in
    chunks of 3 (the last one short), the bytes those of the copies one by one."""
    rng = random.Random(3)
    device = rng.sample(range(PAGES), 5)
    copies = []
    for i, page in enumerate(device):
        copies.append(PageCopy(False, page, 9 if i == 0 else i - 1))
        copies.append(PageCopy(True, page, i))
    ex = executor(3, separate=True)
    uploads = []
    upload = ex._upload_copy_index
    ex._upload_copy_index = lambda pages, gpu: uploads.append(list(pages)) or upload(pages, gpu)
    check(ex, copies)
    assert [len(u) for u in uploads] == [3, 3, 3, 1]


def test_the_staging_is_bounded_and_allocated_at_load():
    assert copy_staging_pages(0, 4096) == 0
    assert copy_staging_pages(64, 4096) == 64  # the tier is smaller than the bound
    assert copy_staging_pages(10**6, 2**20) == COPY_STAGING_BYTES // 2**20
    assert copy_staging_pages(4, 2 * COPY_STAGING_BYTES) == 1  # at least one page
    ex = executor(None)
    assert ex.staging_pages == HOSTS
    assert {name: tuple(t.shape) for name, t in ex.copy_staging.items()} == {
        name: (HOSTS, *shape) for name, (shape, _) in SHAPES.items()}
