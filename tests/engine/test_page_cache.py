"""The page cache (host only): allocation, reference counts, prefix reuse by chained page keys,
eviction of unreferenced pages, and incremental page-table uploads."""

from __future__ import annotations

import pytest

from helios.engine.page_cache import (
    PageCache,
    PageNotHeld,
    PagesShort,
    PageTableUploads,
    SequencePages,
    pages_for,
)


def test_pages_for_rounds_up():
    assert [pages_for(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


def test_allocation_is_lowest_first_and_all_or_nothing():
    cache = PageCache(4, 2, "m")
    assert cache.allocate(3) == [0, 1, 2]
    with pytest.raises(PagesShort, match="need 2 pages, 1 of 4"):
        cache.allocate(2)
    assert cache.available == 1  # a failed allocation takes nothing
    cache.release([1])
    assert cache.allocate(2) == [1, 3]
    with pytest.raises(PageNotHeld):
        cache.release([1, 1])


def _published(cache: PageCache, tokens: list[int]) -> SequencePages:
    pages = SequencePages(cache)
    pages.reserve(len(tokens))
    pages.publish(tokens, consumed=len(tokens))
    return pages


def test_a_complete_page_prefix_is_reused_and_the_last_token_is_left_to_compute():
    cache = PageCache(8, 4, "m")
    first = _published(cache, list(range(10)))  # pages 0, 1 complete; page 2 holds 2 positions
    assert len(first.keys) == 2
    match = cache.lookup(list(range(12)), limit=11)
    assert match.pages == tuple(first.pages[:2]) and match.tokens == 8
    # A prompt of exactly 8 tokens reuses one page only: its last token must be consumed to sample.
    assert cache.lookup(list(range(8)), limit=7).tokens == 4
    # A different first page shares nothing, even with equal later tokens: keys chain the prefix.
    assert cache.lookup([99, 1, 2, 3, 4, 5, 6, 7, 8], limit=8).tokens == 0


def test_keys_depend_on_the_cache_identity():
    a, b = PageCache(2, 2, "model-a"), PageCache(2, 2, "model-b")
    assert a.chain_key(b"", [1, 2]) != b.chain_key(b"", [1, 2])
    assert a.chain_key(b"", [1, 2]) == PageCache(2, 2, "model-a").chain_key(b"", [1, 2])


def test_released_published_pages_stay_cached_until_evicted_oldest_first():
    cache = PageCache(3, 2, "m")
    one = _published(cache, [1, 2])
    two = _published(cache, [3, 4])
    one.release()
    two.release()
    gauges = cache.gauges()
    assert (gauges.in_use, gauges.cached, gauges.free) == (0, 2, 1)
    assert cache.lookup([1, 2, 9], limit=2).tokens == 2  # reusable after release
    cache.release([0])
    cache.allocate(2)  # the free page, then the least recently released cached page ([3, 4])
    assert cache.gauges().evictions == 1
    assert cache.lookup([3, 4, 9], limit=2).tokens == 0
    assert cache.lookup([1, 2, 9], limit=2).tokens == 2


def test_referenced_pages_are_never_evicted():
    cache = PageCache(2, 2, "m")
    held = _published(cache, [1, 2, 3, 4])
    with pytest.raises(PagesShort):
        cache.allocate(1)
    held.release()
    assert cache.available == 2


def test_a_duplicate_key_leaves_the_second_page_private():
    cache = PageCache(4, 2, "m")
    _published(cache, [1, 2])
    second = _published(cache, [1, 2])
    second.release()
    assert cache.gauges().free == 3  # the duplicate was never published: it went back to the free list


def test_reuse_can_be_turned_off():
    cache = PageCache(4, 2, "m", prefix_reuse=False)
    _published(cache, [1, 2, 3, 4]).release()
    assert cache.lookup([1, 2, 3, 4, 5], limit=4).tokens == 0
    assert cache.gauges().cached == 0


def test_page_table_uploads_only_new_entries_and_generations_invalidate():
    uploads = PageTableUploads()
    assert uploads.delta(0, 1, [5]) == (0, (5,))
    assert uploads.delta(0, 1, [5]) == (1, ())
    assert uploads.delta(0, 1, [5, 6, 7]) == (1, (6, 7))
    assert uploads.delta(0, 2, [5, 6]) == (0, (5, 6))  # a new request in the slot: the whole row
    assert uploads.delta(1, 1, [9]) == (0, (9,))
    assert uploads.entries_uploaded == 1 + 2 + 2 + 1


def test_page_ids_are_one_tuple_until_pages_are_added():
    """Every round's lane carries the sequence's page ids: while no page is added they are the same
    tuple (no per-round copy, and an executor compares them at no cost)."""
    cache = PageCache(8, 4, "m")
    pages = SequencePages(cache)
    pages.reserve(3)
    first = pages.page_ids
    pages.reserve(4)  # still one page
    assert pages.page_ids is first and first == tuple(pages.pages)
    pages.reserve(5)
    assert pages.page_ids == tuple(pages.pages) and len(pages.page_ids) == 2
    pages.release()
    assert pages.page_ids == ()
