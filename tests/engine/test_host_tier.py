"""The host tier (CPU, fp32): with the device cache forced small, checkpoints evicted by later
requests move to host memory and a request re-sending a long prompt readmits them (explicit copies,
counted) instead of recomputing; its tokens equal the run without the tier, the tier never holds more
pages than its option, and the metrics move through the /metrics collector. The batching scheduler
drives the reference executor (host tier: NumPy arrays); tests/production/test_host_tier_production.py
drives the production executor the same way."""

from __future__ import annotations

import random

import pytest

from helios.engine.host_tier import HostTier
from helios.engine.page_cache import PageCache
from helios.engine.worker import BatchingRuntime
from helios.ignition.prepare import prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.reference.executor import ReferenceExecutor
from helios.runtime.host_cache import GIB, InvalidHostCache, host_bytes, host_pages, within_device
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams
from helios.runtime.rounds import PageCopy
from tests.engine.test_batching_runtime import OPTIONS, serve

PAGES = 12  # device pages: one 30-token prompt's 8 pages, and little more


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


def resent_long_prompts(seed: int, count: int = 3) -> list[GenerationRequest]:
    """Three 30-token prompts, then each re-sent (greedy and seeded): every one evicts the previous
    one's checkpoints from a 12-page cache, so a re-sent prompt finds its prefix only in the host tier."""
    rng = random.Random(seed)
    prompts = [tuple(rng.randrange(256) for _ in range(30)) for _ in range(count)]
    samplings = [SamplingParams(temperature=0.0), SamplingParams(temperature=0.9, top_k=20, seed=5)]
    return [GenerationRequest(prompt, max_tokens=5, sampling=samplings[i % 2], ignore_eos=True)
            for i, prompt in enumerate(prompts + prompts)]


def host_runtime(core, host: int) -> BatchingRuntime:
    engine = ReferenceEngine.load(core, pages=PAGES)
    executor = ReferenceExecutor.load(core, pages=PAGES, host_pages=host)
    return BatchingRuntime.for_executor(executor, engine.contract, AdmissionLimits(max_active=1, queue_capacity=16),
                                        pages=PAGES)


def run(runtime: BatchingRuntime, requests: list[GenerationRequest]) -> list[list[int]]:
    capacity = runtime.scheduler.cache.host.pages
    submit = runtime.executor.submit

    def bounded(plan):  # the tier never holds more than its option, at any submission
        assert runtime.scheduler.cache.host.in_use <= capacity
        submit(plan)

    runtime.executor.submit = bounded
    return [r.tokens for r in serve(runtime, [PreparedRequest(f"r{i}", r, observe_tokens=True) for i, r in enumerate(requests)])]


def random_copies(rng: random.Random, count: int, *, pages: int, rows: int, hosts: int) -> list[PageCopy]:
    """`count` host-tier copies drawn at random: offloads of device pages or continuation rows and
    readmissions, over `pages` device pages, `rows` continuation rows and `hosts` host pages."""
    copies = []
    for _ in range(count):
        kind = rng.randrange(3)
        if kind == 2:
            copies.append(PageCopy(False, rng.randrange(rows), rng.randrange(hosts), continuation=True))
        else:
            copies.append(PageCopy(kind == 1, rng.randrange(pages), rng.randrange(hosts)))
    return copies


def test_resent_long_prompts_hit_the_host_tier_with_the_tokens_of_recomputation(core):
    requests = resent_long_prompts(11)
    without = host_runtime(core, 0)
    expected = run(without, requests)
    assert all(len(tokens) == 5 for tokens in expected)
    assert without.metrics().host_readmitted_pages == 0 and without.metrics().host_bytes_capacity == 0
    runtime = host_runtime(core, 64)
    assert run(runtime, requests) == expected
    m = runtime.metrics()
    page_bytes = runtime.executor.page_bytes
    # each re-sent prompt's 7 complete pages come back from the host tier (its 30th token is computed)
    assert m.host_readmitted_pages == 3 * 7 and m.host_readmitted_bytes == 3 * 7 * page_bytes
    assert m.host_offloaded_pages >= m.host_readmitted_pages and m.host_evictions == 0
    assert m.host_bytes_capacity == 64 * page_bytes and 0 < m.host_bytes_in_use <= m.host_bytes_capacity
    assert m.reused_prompt_tokens - without.metrics().reused_prompt_tokens == 3 * 7 * OPTIONS.page_tokens


def test_the_tier_stays_within_its_option_and_evicts_least_recently_stored_first(core):
    requests = resent_long_prompts(12)
    expected = run(host_runtime(core, 0), requests)
    runtime = host_runtime(core, 8)  # one prompt's checkpoints: the next evictions push older ones out
    assert run(runtime, requests) == expected
    m = runtime.metrics()
    assert m.host_evictions > 0 and m.host_bytes_in_use <= m.host_bytes_capacity == 8 * runtime.executor.page_bytes
    # the older prompts' checkpoints were pushed out before their re-sends: fewer hits than unbounded
    assert m.host_readmitted_pages < 3 * 7


def test_the_host_metrics_move_through_the_metrics_collector(core):
    from helios.server.metrics import HeliosCollector, ServerCounters

    runtime = host_runtime(core, 64)
    names = ("helios_host_cache_offloaded_pages", "helios_host_cache_offloaded_bytes",
             "helios_host_cache_readmitted_pages", "helios_host_cache_readmitted_bytes", "helios_host_cache_bytes",
             "helios_host_cache_capacity_bytes", "helios_host_cache_evictions")

    def exported() -> dict[str, float]:
        families = HeliosCollector(runtime.metrics, ServerCounters(), lambda: 0, 1).collect()
        return {f.name: f.samples[0].value for f in families if f.name in names}

    before = exported()
    assert set(before) == set(names) and before["helios_host_cache_capacity_bytes"] > 0
    assert before["helios_host_cache_offloaded_pages"] == before["helios_host_cache_bytes"] == 0
    run(runtime, resent_long_prompts(13))
    after = exported()
    for name in names[:5]:
        assert after[name] > 0, name
    assert after["helios_host_cache_evictions"] == 0


def test_a_readmission_reads_its_host_page_before_a_later_offload_reuses_it():
    cache = PageCache(2, 2, "identity", host_pages=1)
    first = cache.allocate(1)
    key = cache.chain_key(b"", (1, 2))
    cache.publish(first[0], key)
    cache.release(first)
    cache.allocate(2)  # evicts the published page: offloaded into the only host page
    assert cache.take_copies() == (PageCopy(False, first[0], 0),)
    cache.release([1])  # a private page: free again
    other = cache.chain_key(b"", (3, 4))
    cache.publish(0, other)
    cache.release([0])  # published, cached
    match = cache.lookup((1, 2, 9), limit=2)  # in the host tier only: readmitted into a device page
    assert match.tokens == 2
    copies = cache.take_copies()
    # the free page serves the readmission: nothing evicted, the copy back alone
    assert copies == (PageCopy(True, 1, 0),)
    assert cache.host.gauges().readmitted == 1 and cache.host.in_use == 0


def test_a_full_tier_does_not_evict_the_entry_being_readmitted():
    tier = HostTier(1)
    assert tier.store(b"a") == 0
    page = tier.take(b"a")
    assert tier.store(b"b") is None and tier.evictions == 0  # its one page is being read: b is lost
    tier.free(page)
    assert tier.store(b"b") == page and tier.in_use == 1


def test_the_host_cache_option():
    assert host_pages(0, 4096) == 0 and host_pages(1, GIB // 4) == 4
    assert host_bytes(None, available=64 * GIB) == 4 * GIB  # capped
    assert host_bytes(None, available=4 * GIB) == GIB  # a quarter of what is available
    # the default tier is at most twice the device cache it backs; an explicit size is taken as given
    assert within_device(host_pages(None, 1024, available=64 * GIB), None, 100) == 2 * 100
    assert within_device(host_pages(None, GIB // 4, available=64 * GIB), None, 100) == 16  # the 4 GiB cap
    assert within_device(host_pages(1, 1024), 1, 100) == GIB // 1024
    with pytest.raises(InvalidHostCache, match="--host-cache-gib"):
        host_bytes(-1)


def test_copy_chunks_gathered_then_scattered_apply_as_the_copies_one_by_one():
    """Random copy sequences (offloads of pages and continuation rows, readmissions, host pages reused)
    applied chunk by chunk, every source of a chunk read before any destination is written (what the
    production executor does through its staging), equal applying them in order."""
    import numpy as np

    from helios.runtime.rounds import copy_chunks

    rng = random.Random(5)
    pages, rows, hosts = 8, 3, 6
    device, row, host = slice(0, pages), slice(pages, pages + rows), slice(pages + rows, None)

    def source(array, c):
        return array[host][c.host_page] if c.readmit else (array[row] if c.continuation else array[device])[c.page]

    def write(array, c, value):
        if c.readmit:
            array[device][c.page] = value
        else:
            array[host][c.host_page] = value

    for _ in range(300):
        copies = random_copies(rng, rng.randrange(1, 14), pages=pages, rows=rows, hosts=hosts)
        start = np.arange(pages + rows + hosts, dtype=np.int64) * 10
        one_by_one, chunked = start.copy(), start.copy()
        for c in copies:
            write(one_by_one, c, source(one_by_one, c))
        limit = rng.randrange(1, 6)
        chunks = copy_chunks(copies, limit)
        for chunk in chunks:
            gathered = [source(chunked, c) for c in chunk]
            for c, value in zip(chunk, gathered, strict=True):
                write(chunked, c, value)
        assert chunked.tolist() == one_by_one.tolist(), copies
        assert [c for chunk in chunks for c in chunk] == copies and all(0 < len(c) <= limit for c in chunks)
    # a readmitted prefix: each readmission's device page offloaded first, each offload reusing the
    # host page the readmission before it read: chunks as full as the limit allows
    interleaved = [c for i in range(100) for c in (PageCopy(False, 200 + i, 299 if i == 0 else i - 1),
                                                   PageCopy(True, 200 + i, i))]
    assert [len(chunk) for chunk in copy_chunks(interleaved, 64)] == [64, 64, 64, 8]


def test_host_pages_are_handed_out_lowest_first_so_pages_stored_together_are_consecutive():
    tier = HostTier(8)
    assert [tier.store(bytes([i])) for i in range(6)] == list(range(6))
    for key in (4, 1, 2, 5):  # readmitted apart, in any order
        tier.free(tier.take(bytes([key])))
    assert [tier.store(bytes([10 + i])) for i in range(5)] == [1, 2, 4, 5, 6]  # the free ones, then a fresh one
    tier.discard(bytes([3]))
    assert tier.store(b"x") == 3


def test_a_lookup_readmits_without_evicting_pages_its_own_chain_matches_later():
    """A prefix whose first pages are in the host tier and whose later ones are still cached on the
    device (least recently released, so first in line for eviction): the readmissions evict other
    pages, never the chain's own, and nothing of the chain is copied out and back."""
    cache = PageCache(4, 1, "identity", host_pages=4)
    chain = [cache.chain_key(b"", (1,))]
    chain.append(cache.chain_key(chain[0], (2,)))
    chain.append(cache.chain_key(chain[1], (3,)))
    pages = cache.allocate(3)
    for page, key in zip(pages, chain, strict=True):
        cache.publish(page, key)
    cache.release(pages)  # cached, least recently released first: pages[0], pages[1], pages[2]
    other = cache.allocate(3)  # the free page, then pages[0] and pages[1] evicted: offloaded
    for i, page in enumerate(other):
        cache.publish(page, cache.chain_key(b"", (7 + i,)))
    cache.release(other)  # cached after pages[2]; no page is free
    cache.take_copies()
    match = cache.lookup((1, 2, 3, 4), limit=3)
    assert match.tokens == 3 and match.pages[2] == pages[2]  # the device page of the chain kept
    copies = cache.take_copies()
    # each readmission evicts (and offloads) one of the other pages, not pages[2], the oldest cached
    assert [(c.readmit, c.page in other) for c in copies] == [(False, True), (True, True)] * 2
    assert cache.host.gauges().readmitted == 2
