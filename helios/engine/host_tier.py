"""The host tier of the page cache (host side, no torch): evicted checkpoints kept in host memory.

    tier = HostTier(pages)                     # pages: helios.runtime.host_cache.host_pages(...)
    host_page, dropped = tier.store(key)       # an evicted checkpoint's key -> its host page (LRU eviction)
    host_page = tier.take(key)                 # a hit: the host page to readmit from (the entry leaves)

When the page cache evicts a cached checkpoint (a published page no sequence references) to make room
and the tier has pages, the checkpoint moves to the tier instead of being lost (and so does a published
continuation evicted for its row: page_cache.py, `offload_continuation`): the cache records a
copy (device page -> host page) that the next submitted round's executor performs before its program
(`helios.runtime.rounds.PageCopy`), and keeps the chain key here. A lookup that finds a key here and
not on the device takes a device page, records the opposite copy (host page -> device page) and
publishes the page under its key again: a readmission, counted. The engine only decides; the
executors copy (production: pinned host tensors on a GPU, plain ones on a CPU; reference: NumPy).

Bounded. The tier holds at most `pages` entries; storing into a full tier evicts its least recently
stored entry first (a hit takes its entry out) (`evictions`), so it never grows past its option. Copies are ordered: a
host page freed by a readmission and reused by a later offload is read (readmission) before it is
written (offload), since both are applied in the order decided, on one stream.

Contiguity. Which host page an entry gets decides how many copies an executor enqueues: production
copies runs of consecutive host pages at once (helios/production/executor.py), and pages offloaded
together are readmitted together (a prefix's chain). So a store takes the lowest free page, else the
lowest never used: one round's offloads fill ascending runs, and pages freed apart join up again.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class HostGauges:
    """What /metrics reports about the host tier (pages; the worker converts to bytes)."""

    capacity: int  # host pages the tier may hold
    in_use: int  # host pages holding a checkpoint
    offloaded: int  # checkpoints moved device -> host
    readmitted: int  # checkpoints moved host -> device on a hit
    evictions: int  # host entries dropped to make room (least recently used first)


class HostTier:
    """Chain keys of checkpoints held in `pages` host pages, least recently used first."""

    def __init__(self, pages: int) -> None:
        if pages < 0:
            raise ValueError(f"a host tier holds >= 0 pages, got {pages}")
        self.pages = pages
        self._entries: OrderedDict[bytes, int] = OrderedDict()  # key -> host page; least recent first
        self._free: list[int] = []  # a heap: host pages returned (reused first, lowest first)
        self._fresh = 0  # host pages [0, _fresh) handed out at least once: no free list of `pages` entries
        self.offloaded = 0
        self.readmitted = 0
        self.evictions = 0

    def __contains__(self, key: bytes) -> bool:
        return key in self._entries

    @property
    def in_use(self) -> int:
        return len(self._entries)

    def store(self, key: bytes) -> int | None:
        """A host page for an evicted checkpoint keyed `key`; evicts the least recently stored entry when
        full. None (the checkpoint is lost, as without a tier): the tier has no pages, or its only free
        one is being read by a readmission (`take` before `free`)."""
        if not self.pages:
            return None
        held = self._entries.pop(key, None)
        if held is not None:  # the same prefix offloaded again: its newest copy replaces the old one
            heapq.heappush(self._free, held)
        if self._free:
            page = heapq.heappop(self._free)
        elif self._fresh < self.pages:
            page, self._fresh = self._fresh, self._fresh + 1
        elif self._entries:
            _, page = self._entries.popitem(last=False)
            self.evictions += 1
        else:
            return None
        self._entries[key] = page
        self.offloaded += 1
        return page

    def take(self, key: bytes) -> int:
        """The host page holding `key`, for a readmission: the entry leaves the tier (the checkpoint is
        on the device again); its page is reused only after `free(page)`, which the caller calls once
        the copy out of it is recorded (an offload recorded before it must not write it)."""
        page = self._entries.pop(key)
        self.readmitted += 1
        return page

    def free(self, page: int) -> None:
        heapq.heappush(self._free, page)

    def untake(self, key: bytes, page: int) -> None:
        """Undo `take(key)` before anything copied out of `page` (the readmission found no device page):
        the entry is back, most recently used."""
        self._entries[key] = page
        self.readmitted -= 1

    def discard(self, key: bytes) -> None:
        """Forget `key` (the device published the same prefix again: that page is the checkpoint)."""
        page = self._entries.pop(key, None)
        if page is not None:
            heapq.heappush(self._free, page)

    def gauges(self) -> HostGauges:
        return HostGauges(capacity=self.pages, in_use=len(self._entries), offloaded=self.offloaded,
                          readmitted=self.readmitted, evictions=self.evictions)
