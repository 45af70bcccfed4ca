"""Snapshots of preempted requests (host side, no torch): `Snapshot` and `ContinuationRows`.

A snapshot preserves a request's complete committed state at an exact token endpoint E:

    pages  [ checkpoint 0 | checkpoint 1 | ... | checkpoint K-1 | partial page K ]     K = E // T
            immutable checkpoints: published, keyed     continuation row: positions [K*T, E)
            (the snapshot holds their references)       (copied out by a RESTORATION round)

The complete pages are immutable checkpoints: published under their chain keys (other requests still
match them by prefix) and owned by the snapshot, which holds one reference on each. The partial page's
payload (every history plane's records of positions [K*T, E)) is copied into a continuation row by a
RESTORATION round (its SNAPSHOT_DESTINATION); the partial page itself returns to the cache once that
round's fence has passed. Readmission takes the checkpoints' references back, gives the request a
fresh private page, and a RESTORATION round copies the row into it (RESTORE_SOURCE): the request
resumes at E with nothing recomputed. A snapshot given up under page pressure (`evicted`) releases its
checkpoints to the cache (still matchable until evicted) and its row; its request recomputes what it
then cannot match, counted as recomputed tokens.

`ContinuationRows` hands out the snapshot rows of the continuation storage, the rows the partition of
`helios.runtime.packing.snapshot_rows` gives snapshots; lowest first, so runs are reproducible.

Published continuations (mid-page prefix hits). A request that ends by EOS or its output limit with
its endpoint E inside a page has that partial page snapshotted into a row after its last round's
fence and *published*: keyed by the chain key of its complete pages (`parent`, the key of page
K - 1, or b"" for K = 0) and the exact tokens of positions [K*T, E). A later request whose lookup
matched exactly those complete pages and whose known tokens continue with those tokens (with at
least one token left to consume) restores the row into a private page and starts at E (`match`). A
published row is pinned while a restore reads it. Rows are shared with preemption snapshots: `take`
hands out a free row first, else evicts the least recently published or matched unpinned
continuation (`evictions`; with a host tier it moves there, `evicted`), else has none.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from helios.contract.enums import HistoryKind
from helios.errors import HeliosError
from helios.runtime.packing import snapshot_rows


class RowNotHeld(HeliosError):
    """A continuation row was returned that is not handed out (a bookkeeping error)."""


@dataclass(slots=True)
class Snapshot:
    """A preempted request's committed state at `endpoint` (see the module docstring)."""

    endpoint: int  # E: positions [0, E) are preserved
    pages: list[int]  # the checkpoints: complete pages [0, E // T), one reference each held here
    keys: list[bytes]  # their chain keys
    row: int | None  # the continuation row holding the partial page, None when E is a page boundary


@dataclass(slots=True)
class Continuation:
    """A published continuation snapshot: the partial page after the prefix keyed `parent`."""

    parent: bytes  # chain key of the complete pages before it (b"": none)
    tokens: tuple[int, ...]  # the tokens of its positions [K*T, E), 0 < len < T
    row: int  # the continuation row holding every plane's page record
    pins: int = 0  # restores submitted and not yet fenced that read the row


class ContinuationRows:
    """The snapshot rows of the continuation storage: `rows` (a range of row indices)."""

    def __init__(self, rows: range) -> None:
        self.rows = rows
        self._free = sorted(rows, reverse=True)  # a stack: the lowest row first
        self._held: set[int] = set()
        self._published: OrderedDict[int, Continuation] = OrderedDict()  # row -> entry, least recent first
        self._by_parent: dict[bytes, list[Continuation]] = {}
        self.published = 0  # continuations published
        self.evictions = 0  # published continuations evicted for a row
        self.hits = 0  # continuations matched by a later request (pinned; the scheduler counts restores)
        # Called with each continuation `take` evicts, before its row is handed over (the residency
        # offloads it to the host tier there: page_cache.py, `offload_continuation`).
        self.evicted: Callable[[Continuation], None] | None = None

    @property
    def published_rows(self) -> int:
        return len(self._published)

    @property
    def capacity(self) -> int:
        return len(self.rows)

    @property
    def in_use(self) -> int:
        return len(self._held)

    def take(self) -> int | None:
        """A free row, else the row of the least recently published or matched unpinned continuation
        (evicted), else None."""
        if not self._free:
            for row, entry in self._published.items():
                if not entry.pins:
                    self._forget(entry)
                    self.evictions += 1
                    if self.evicted is not None:
                        self.evicted(entry)
                    return row  # held already: handed over as it is
            return None
        row = self._free.pop()
        self._held.add(row)
        return row

    def publish(self, row: int, parent: bytes, tokens: Sequence[int]) -> bool:
        """Publish the held `row` (just snapshotted) as the continuation of `parent` with `tokens`;
        False, and the row is returned, when the same continuation is published already."""
        tokens = tuple(tokens)
        if row not in self._held or row in self._published:
            raise RowNotHeld(f"continuation row {row} is published without being held by its snapshot")
        if any(e.tokens == tokens for e in self._by_parent.get(parent, ())):
            self.give(row)
            return False
        entry = Continuation(parent, tokens, row)
        self._published[row] = entry
        self._by_parent.setdefault(parent, []).append(entry)
        self.published += 1
        return True

    def match(self, parent: bytes, tokens: Sequence[int], start: int, limit: int) -> Continuation | None:
        """The longest published continuation of `parent` whose tokens are `tokens[start:E]` with
        E <= `limit`; pinned (the caller `unpin`s it once its restore is fenced, or given up)."""
        best = None
        for entry in self._by_parent.get(parent, ()):
            end = start + len(entry.tokens)
            if end <= limit and (best is None or len(entry.tokens) > len(best.tokens)) \
                    and tuple(tokens[start:end]) == entry.tokens:
                best = entry
        if best is not None:
            best.pins += 1
            self._published.move_to_end(best.row)
            self.hits += 1
        return best

    def unpin(self, row: int) -> None:
        entry = self._published.get(row)
        if entry is None or entry.pins < 1:
            raise RowNotHeld(f"continuation row {row} is unpinned without a restore reading it")
        entry.pins -= 1

    def _forget(self, entry: Continuation) -> None:
        del self._published[entry.row]
        siblings = self._by_parent[entry.parent]
        siblings.remove(entry)
        if not siblings:
            del self._by_parent[entry.parent]

    def give(self, row: int) -> None:
        if row not in self._held or row in self._published:
            raise RowNotHeld(f"continuation row {row} is returned without being held")
        self._held.remove(row)
        self._free.append(row)
        self._free.sort(reverse=True)


def continuation_rows(contract, graphs: Iterable) -> range:
    """The snapshot rows of a `PreparedContract`'s continuation storage for the selected `graphs`
    (empty without a CONTINUATION region): the partition of `snapshot_rows`, with the maximum
    state_rows_per_request among the selected graphs."""
    if not any(h.kind == HistoryKind.CONTINUATION for h in contract.cache.histories):
        return range(0)
    state_rows = max((g.state_rows_per_request for g in graphs), default=0)
    return snapshot_rows(contract.max_concurrency, contract.snapshot_capacity, state_rows)
