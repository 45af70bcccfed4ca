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
"""

from __future__ import annotations

from collections.abc import Iterable
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


class ContinuationRows:
    """The snapshot rows of the continuation storage: `rows` (a range of row indices)."""

    def __init__(self, rows: range) -> None:
        self.rows = rows
        self._free = sorted(rows, reverse=True)  # a stack: the lowest row first
        self._held: set[int] = set()

    @property
    def capacity(self) -> int:
        return len(self.rows)

    @property
    def in_use(self) -> int:
        return len(self._held)

    def take(self) -> int | None:
        """A free row, or None when every row holds a snapshot."""
        if not self._free:
            return None
        row = self._free.pop()
        self._held.add(row)
        return row

    def give(self, row: int) -> None:
        if row not in self._held:
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
