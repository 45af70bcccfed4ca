"""The page cache (host side, no torch): which physical cache pages hold which tokens.

Owns page bookkeeping for every history plane of a core at once (all planes share one page id
space, as the page-table views declare): free pages, reference counts, prefix reuse, eviction and
the incremental page-table upload rule. It never touches device memory: the scheduler gives lanes
page ids, the captured programs write and read the planes.

Pages and prefixes. A page holds `page_tokens` consecutive token positions of one sequence. When
every position of a page has been consumed (its history committed by a validated round), the page
may be *published* under its chain key:

    key(page i) = H(cache_identity, key(page i-1), tokens of page i)          key(page -1) = b""

so a key names a whole prefix, not just one page's tokens; the contract's `cache_identity` keeps
cores with different weights or geometry apart. A later request whose tokens start with the same
complete pages takes references on those pages instead of computing them (`lookup`). Published
pages are immutable: a sequence only ever writes positions past what it reused, and a lookup never
matches the page holding a request's last known token (that token must be consumed to sample).

Lifetime. A page is *free* (no reference, no key), *referenced* (held by one or more sequences), or
*cached* (published, no reference: reusable and evictable, least recently released first).
`allocate` takes free pages first, then evicts cached ones; when both run out the caller preempts.

Host tier. With `host_pages` (host_tier.py), an evicted cached page is not lost: its key moves to
the host tier and a copy (device page -> host page) is recorded; a lookup whose next key is in the
host tier, not on the device, takes a device page for it, records the copy back and publishes the
page under its key again (a readmission). `take_copies` hands the recorded copies, in order, to the
next round the scheduler submits (`RoundPlan.page_copies`): the executor performs them before that
round's program, so every round that reads a readmitted page, or a page whose old content was
offloaded, runs after its copy.

Page-table uploads. `PageTableUploads` remembers, per physical request slot, how many entries of the
slot's page-table row the device already holds and under which slot generation; a round uploads only
the entries assigned since, and a new generation (a new request in the slot) invalidates the memory.
"""

from __future__ import annotations

import hashlib
import struct
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from helios.engine.host_tier import HostTier
from helios.errors import HeliosError
from helios.runtime.rounds import PageCopy


class PagesShort(HeliosError):
    """More pages were asked for than are free or evictable (the scheduler preempts or waits)."""


class PageNotHeld(HeliosError):
    """A page was released that holds no reference (a bookkeeping error)."""


# What a page's records depend on besides its tokens, given its positions [start, end) (an image
# layout's page content: the digests of the images whose sentinels it holds); b"" for none.
PageContent = Callable[[int, int], bytes]

def pages_for(tokens: int, page_tokens: int) -> int:
    """Pages holding `tokens` positions: ceil(tokens / page_tokens)."""
    return -(-tokens // page_tokens)


def _token_bytes(tokens: Sequence[int]) -> bytes:
    """`tokens` as 4-byte little-endian unsigned fields, the bytes a page key hashes (struct.error for
    an id outside 0 .. 2^32 - 1)."""
    return struct.pack(f"<{len(tokens)}I", *tokens)


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """The outcome of a lookup: referenced pages holding the first `tokens` tokens."""

    pages: tuple[int, ...]  # page ids in sequence order (references already taken)
    keys: tuple[bytes, ...]  # each page's chain key
    tokens: int  # len(pages) * page_tokens


@dataclass(frozen=True, slots=True)
class CacheGauges:
    """What /metrics reports about the cache."""

    capacity: int  # physical pages
    in_use: int  # pages referenced by at least one sequence
    cached: int  # published pages no sequence references (reusable, evictable)
    free: int  # pages with neither
    lookups: int  # prefix lookups performed
    hit_tokens: int  # tokens served by lookups
    evictions: int  # cached pages evicted to satisfy allocations
    published: int = 0  # pages published as immutable checkpoints (newly keyed)


class PageCache:
    """Free list, reference counts and the prefix index over `pages` physical pages."""

    def __init__(self, pages: int, page_tokens: int, cache_identity: str, *, prefix_reuse: bool = True,
                 host_pages: int = 0) -> None:
        if pages < 1:
            raise ValueError(f"a page cache has at least one page, got {pages}")
        if page_tokens < 1:
            raise ValueError(f"page_tokens must be >= 1, got {page_tokens}")
        self.pages = pages
        self.page_tokens = page_tokens
        self.prefix_reuse = prefix_reuse
        self._identity = hashlib.blake2b(cache_identity.encode("utf-8"), digest_size=16).digest()
        self._free: list[int] = list(range(pages - 1, -1, -1))  # a stack: lowest id handed out first
        self._references = [0] * pages
        self._key_of: dict[int, bytes] = {}  # published page -> its chain key
        self._page_of: dict[bytes, int] = {}  # chain key -> published page
        self._cached: OrderedDict[int, None] = OrderedDict()  # published, unreferenced; oldest first
        self._lookups = 0
        self._hit_tokens = 0
        self._evictions = 0
        self._published = 0
        self.host = HostTier(host_pages if prefix_reuse else 0)  # evicted checkpoints kept in host memory
        self._copies: list[PageCopy] = []  # host-tier copies decided and not yet handed to a round

    # ------------------------------------------------------------------------------------ keys

    def chain_key(self, parent: bytes, tokens: Sequence[int], content: bytes = b"") -> bytes:
        """The key of a page holding `tokens` after the prefix keyed `parent`; `content` is what else
        the page's records depend on (an image layout's `page_content`: the digests of the images
        whose sentinels it holds), so equal sentinel ids of different images never share a page."""
        if len(tokens) != self.page_tokens:
            raise ValueError(f"a page key covers exactly {self.page_tokens} tokens, got {len(tokens)}")
        digest = hashlib.blake2b(digest_size=16)
        digest.update(self._identity)
        digest.update(parent)
        digest.update(_token_bytes(tokens))
        if content:
            digest.update(len(content).to_bytes(8, "little") + content)
        return digest.digest()

    # ------------------------------------------------------------------------------------ pages

    @property
    def available(self) -> int:
        """Pages an allocation can obtain now (free plus evictable)."""
        return len(self._free) + len(self._cached)

    def allocate(self, count: int) -> list[int]:
        """`count` private pages, each with one reference; raises PagesShort (taking nothing) if short."""
        if count < 0:
            raise ValueError(f"cannot allocate {count} pages")
        if count > self.available:
            raise PagesShort(f"need {count} pages, {self.available} of {self.pages} are free or evictable")
        out = []
        for _ in range(count):
            page = self._take()
            self._references[page] = 1
            out.append(page)
        return out

    def _take(self) -> int:
        """A free page, else the least recently released cached one, evicted (offloaded to the host
        tier when it has pages); the caller checked `available`."""
        if self._free:
            return self._free.pop()
        page, _ = self._cached.popitem(last=False)
        key = self._key_of.pop(page)
        del self._page_of[key]
        self._evictions += 1
        host_page = self.host.store(key)
        if host_page is not None:
            self._copies.append(PageCopy(False, page, host_page))
        return page

    def continuation_key(self, parent: bytes, tokens: Sequence[int]) -> bytes:
        """The host-tier key of a published continuation: the partial page of `tokens` (fewer than a
        page) after the prefix keyed `parent` (b"": none); apart from every chain key."""
        digest = hashlib.blake2b(digest_size=16, person=b"continuation")
        digest.update(self._identity)
        digest.update(parent)
        digest.update(_token_bytes(tokens))
        return digest.digest()

    def offload_continuation(self, row: int, parent: bytes, tokens: Sequence[int]) -> bool:
        """A published continuation evicted for its continuation `row` moves to the host tier (a copy
        row -> host page, performed before the next round, which is the earliest that can write the
        row); False when the tier has no page for it (it is lost, as without a tier)."""
        host_page = self.host.store(self.continuation_key(parent, tokens))
        if host_page is None:
            return False
        self._copies.append(PageCopy(False, row, host_page, continuation=True))
        return True

    def host_continuation(self, parent: bytes, tokens: Sequence[int], start: int,
                          limit: int) -> tuple[bytes, int] | None:
        """(key, E) of the longest continuation of `parent` in the host tier whose tokens are
        `tokens[start:E]` with E <= `limit` (None: none)."""
        if not self.host.in_use:
            return None
        for end in range(min(start + self.page_tokens - 1, limit), start, -1):
            key = self.continuation_key(parent, tokens[start:end])
            if key in self.host:
                return key, end
        return None

    def readmit_into(self, page: int, host_page: int) -> None:
        """Copy a host tier's entry taken as `host_page` (`HostTier.take`) into the private `page` (at
        the next round); the host page is reused after that copy."""
        self._copies.append(PageCopy(True, page, host_page))
        self.host.free(host_page)

    def take_copies(self) -> tuple[PageCopy, ...]:
        """The host-tier copies recorded since the last call, in order (the next round performs them)."""
        if not self._copies:
            return ()
        out, self._copies = tuple(self._copies), []
        return out

    def freed_by(self, holders: Iterable[Sequence[int]]) -> int:
        """Pages that releasing every one of `holders` (each a sequence's pages) would make
        allocatable: those holding no reference besides theirs."""
        counts = Counter(page for pages in holders for page in pages)
        return sum(1 for page, count in counts.items() if count == self._references[page])

    def release(self, pages: Sequence[int]) -> None:
        """Drop one reference on each page; unreferenced pages become cached (if published) or free."""
        for page in pages:
            if self._references[page] < 1:
                raise PageNotHeld(f"page {page} is released without a reference")
            self._references[page] -= 1
            if self._references[page] == 0:
                if page in self._key_of:
                    self._cached[page] = None
                else:
                    self._free.append(page)

    def publish(self, page: int, key: bytes) -> bool:
        """Make a referenced, completely consumed page reusable under `key`. False (and the page
        stays private) when reuse is off, the page is already published, or the key has a page."""
        if self._references[page] < 1:
            raise PageNotHeld(f"page {page} is published without a reference")
        if not self.prefix_reuse or page in self._key_of or key in self._page_of:
            return False
        self.host.discard(key)  # recomputed while its copy waited in the host tier: this page is it now
        self._key_of[page] = key
        self._page_of[key] = page
        self._published += 1
        return True

    def lookup(self, tokens: Sequence[int], *, limit: int, content: PageContent | None = None) -> PrefixMatch:
        """Reference the published pages holding the longest complete-page prefix of
        `tokens[:limit]`; `limit` keeps the positions the caller must still compute. A key found in
        the host tier only is readmitted into a device page (free or evicted), while one can be had.
        `content(start, end)`: what else the page of positions [start, end) depends on (`chain_key`)."""
        self._lookups += 1
        pages: list[int] = []
        keys: list[bytes] = []
        if self.prefix_reuse:
            chain: list[tuple[bytes, int | None]] = []  # the matched keys, each on the device (its page) or in the tier
            parent = b""
            for start in range(0, limit - self.page_tokens + 1, self.page_tokens):
                key = self.chain_key(parent, tokens[start:start + self.page_tokens],
                                     content(start, start + self.page_tokens) if content is not None else b"")
                page = self._page_of.get(key)
                if page is None and key not in self.host:
                    break
                chain.append((key, page))
                parent = key
            # The chain's device pages are referenced before any readmission: a readmission takes a page,
            # by eviction where none is free, and must not evict a page the chain matches further on
            # (it would be offloaded and readmitted again within this lookup).
            for _, page in chain:
                if page is not None:
                    if self._references[page] == 0:
                        del self._cached[page]
                    self._references[page] += 1
            for index, (key, page) in enumerate(chain):
                if page is None:
                    if not self.available:  # the rest of the chain is not matched: its references go back
                        self.release([later for _, later in chain[index:] if later is not None])
                        break
                    page = self._readmit(key)
                    self._references[page] += 1  # at once: a readmission later in this lookup cannot evict it
                pages.append(page)
                keys.append(key)
        self._hit_tokens += len(pages) * self.page_tokens
        return PrefixMatch(tuple(pages), tuple(keys), len(pages) * self.page_tokens)

    def _readmit(self, key: bytes) -> int:
        """A device page holding the host tier's checkpoint `key` again (copied at the next round),
        published under it; unreferenced (the caller references it)."""
        host_page = self.host.take(key)  # out of the tier first: the offload below cannot evict it
        page = self._take()  # may offload another cached page (into another host page): recorded first
        self._copies.append(PageCopy(True, page, host_page))
        self.host.free(host_page)
        self._key_of[page] = key
        self._page_of[key] = page
        return page

    def referenced(self) -> dict[int, int]:
        """Pages holding references, with their counts (read-only; an idle cache holds none)."""
        return {page: count for page, count in enumerate(self._references) if count}

    def gauges(self) -> CacheGauges:
        in_use = sum(1 for r in self._references if r > 0)
        return CacheGauges(capacity=self.pages, in_use=in_use, cached=len(self._cached), free=len(self._free),
                           lookups=self._lookups, hit_tokens=self._hit_tokens, evictions=self._evictions,
                           published=self._published)


class SequencePages:
    """The pages of one admitted sequence, in sequence order, with the keys of its published prefix."""

    __slots__ = ("_cache", "_ids", "keys", "pages")

    def __init__(self, cache: PageCache, match: PrefixMatch | None = None) -> None:
        self._cache = cache
        self.pages: list[int] = list(match.pages) if match else []
        self.keys: list[bytes] = list(match.keys) if match else []  # keys of pages [0, len(keys))
        self._ids: tuple[int, ...] = tuple(self.pages)

    @property
    def page_ids(self) -> tuple[int, ...]:
        """The pages as a tuple, rebuilt only when pages were added: a lane of every round carries it,
        and an unchanged page table is then the same object (compared at no cost)."""
        if len(self._ids) != len(self.pages):
            self._ids = tuple(self.pages)
        return self._ids

    @property
    def reserved_tokens(self) -> int:
        return len(self.pages) * self._cache.page_tokens

    def shortfall(self, tokens: int) -> int:
        """Pages still to allocate before positions [0, tokens) all have a page."""
        return max(pages_for(tokens, self._cache.page_tokens) - len(self.pages), 0)

    def reserve(self, tokens: int) -> None:
        """Hold pages for positions [0, tokens); raises PagesShort (taking nothing) if short."""
        need = self.shortfall(tokens)
        if need:
            self.pages.extend(self._cache.allocate(need))

    def publish(self, tokens: Sequence[int], consumed: int, content: PageContent | None = None) -> int:
        """Publish every page whose positions all lie below `consumed` (committed history); `tokens`
        are the sequence's known tokens, `content` what else each page depends on (`chain_key`).
        Returns how many pages were newly keyed."""
        page_tokens = self._cache.page_tokens
        published = 0
        while len(self.keys) < min(consumed // page_tokens, len(self.pages)):
            i = len(self.keys)
            parent = self.keys[-1] if self.keys else b""
            start, end = i * page_tokens, (i + 1) * page_tokens
            key = self._cache.chain_key(parent, tokens[start:end], content(start, end) if content is not None else b"")
            published += int(self._cache.publish(self.pages[i], key))
            self.keys.append(key)
        return published

    @classmethod
    def adopt(cls, cache: PageCache, pages: Sequence[int], keys: Sequence[bytes]) -> SequencePages:
        """Pages whose references the caller hands over (a snapshot's checkpoints), keyed by `keys`."""
        held = cls(cache)
        held.pages, held.keys = list(pages), list(keys)
        return held

    def keep(self, count: int) -> tuple[list[int], list[bytes]]:
        """Keep the references of the first `count` pages for the caller (a snapshot's checkpoints) and
        release the rest; this sequence then holds none."""
        kept, rest = self.pages[:count], self.pages[count:]
        keys = self.keys[:count]
        self.pages, self.keys, self._ids = [], [], ()
        self._cache.release(rest)
        return kept, keys

    def release(self) -> None:
        """Return every page (published ones stay cached for reuse)."""
        pages, self.pages = self.pages, []
        self.keys = []
        self._ids = ()
        self._cache.release(pages)


class PageTableUploads:
    """Which page-table entries the device already holds, per physical request slot."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[int, int]] = {}  # slot -> (generation, entries uploaded)
        self.entries_uploaded = 0

    def delta(self, slot: int, generation: int, page_ids: Sequence[int]) -> tuple[int, tuple[int, ...]]:
        """(first index, entries) a round must upload for `slot`: only entries assigned since the
        last upload under the same generation; a new generation uploads the row from index 0."""
        held_generation, held = self._held.get(slot, (-1, 0))
        if held_generation == generation and held == len(page_ids):
            return held, ()  # nothing assigned since the last upload (most rounds)
        start = held if held_generation == generation and held <= len(page_ids) else 0
        entries = tuple(page_ids[start:])
        self._held[slot] = (generation, len(page_ids))
        self.entries_uploaded += len(entries)
        return start, entries

    def forget(self, slot: int) -> None:
        self._held.pop(slot, None)
