"""The reference page allocator (host side, NumPy only): page ids over cache planes held as plain arrays.

Owns which physical pages are free. A request holds its pages in sequence order (logical page i is
its i-th id); it asks for more as its consumed tokens grow and returns them all when it finishes or
is cancelled. Pages are handed out lowest id first, so runs are reproducible.
"""

from __future__ import annotations

import heapq

from helios.errors import HeliosError


class PagesExhausted(HeliosError):
    """A request needs more pages than the cache has free."""


class PageAllocator:
    """Free-list of page ids [0, pages)."""

    def __init__(self, pages: int) -> None:
        if pages < 1:
            raise ValueError(f"a cache has at least one page, got {pages}")
        self.pages = pages
        self._free = list(range(pages))  # a heap
        self._held: set[int] = set()

    @property
    def free(self) -> int:
        return len(self._free)

    def allocate(self, count: int) -> list[int]:
        if count < 0:
            raise ValueError(f"cannot allocate {count} pages")
        if count > len(self._free):
            raise PagesExhausted(f"need {count} pages, {len(self._free)} of {self.pages} are free")
        ids = [heapq.heappop(self._free) for _ in range(count)]
        self._held.update(ids)
        return ids

    def release(self, ids: list[int]) -> None:
        for page in ids:
            if page not in self._held:
                raise ValueError(f"page {page} is not held")
            self._held.remove(page)
            heapq.heappush(self._free, page)


def pages_for(tokens: int, page_tokens: int) -> int:
    """Pages that hold `tokens` tokens: ceil(tokens / page_tokens)."""
    return -(-tokens // page_tokens)
