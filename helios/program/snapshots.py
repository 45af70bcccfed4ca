"""The snapshot operators of the set (host side): the specs of `page_snapshot` and `page_restore`
(version 5).

A RESTORATION program moves partial-page payloads between a cache plane and its continuation plane
(docs/snapshots.md). Each lane names its physical slot, its consumed-token endpoint E and a
continuation row; the page concerned is the one holding position E of the lane's page table,
`page_table[slot, E // T]` (T: the plane's page tokens). `page_snapshot` copies that page into the
row; `page_restore` copies the row into that page. A lane whose row is -1 (or outside the plane), or
whose page-table entry is padding, copies nothing. Both update their first input in place.
`docs/operators.md` gives the exact semantics; `helios.reference.snapshots` is the executable
definition.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from helios.program.spec import AttributeValue, OperatorSpec, RuleError
from helios.program.types import ACTIVATION_DTYPES, I32, TensorType

SINCE = 5


def _plane(t: TensorType, what: str) -> None:
    if t.dtype not in ACTIVATION_DTYPES or t.rank != 4 or any(e == 0 for e in t.shape[1:]):
        raise RuleError(f"{what} must be a floating [rows, T, kv_heads, head_dim] plane, got {t}")


def _copy_rule(ins: Sequence[TensorType], attrs: Mapping[str, AttributeValue],
               outs: Sequence[TensorType | None], *, destination: str, source: str) -> list[TensorType]:
    first, second, page_table, lane_slot, endpoint, rows = ins
    planes = {destination: first, source: second}
    cache, continuation = planes["cache"], planes["continuation"]
    _plane(cache, "cache")
    _plane(continuation, "continuation")
    if cache.dtype != continuation.dtype or cache.shape[1:] != continuation.shape[1:]:
        raise RuleError(f"continuation {continuation} must hold pages of cache {cache} (one dtype, one page shape)")
    if continuation.shape[0] == 0:
        raise RuleError(f"continuation {continuation} declares its rows")
    if page_table.dtype != I32 or page_table.rank != 2:
        raise RuleError(f"page_table must be i32 [S, max_pages], got {page_table}")
    for t, what in ((lane_slot, "lane_slot"), (endpoint, "endpoint"), (rows, "rows")):
        if t.dtype != I32 or t.rank != 1:
            raise RuleError(f"{what} must be i32 [B], got {t}")
    if not lane_slot.shape == endpoint.shape == rows.shape:
        raise RuleError(f"lane_slot {lane_slot}, endpoint {endpoint} and rows {rows} need one row per lane")
    return [first]


def _page_snapshot(ins, attrs, outs):
    return _copy_rule(ins, attrs, outs, destination="continuation", source="cache")


def _page_restore(ins, attrs, outs):
    return _copy_rule(ins, attrs, outs, destination="cache", source="continuation")


SNAPSHOT_SPECS = (
    OperatorSpec("page_snapshot",
                 "continuation[rows[b]] = cache[page_table[lane_slot[b], endpoint[b] // T]] for lanes with a row",
                 ("continuation", "cache", "page_table", "lane_slot", "endpoint", "rows"), ("continuation",),
                 _page_snapshot, in_place=((0, 0),), since=SINCE),
    OperatorSpec("page_restore",
                 "cache[page_table[lane_slot[b], endpoint[b] // T]] = continuation[rows[b]] for lanes with a row",
                 ("cache", "continuation", "page_table", "lane_slot", "endpoint", "rows"), ("cache",),
                 _page_restore, in_place=((0, 0),), since=SINCE),
)
