"""Continuation storage and RESTORATION programs (preparation side, host): reusable declarations.

- `continuation_storage`: one continuation plane per cache plane of every paged history (target and
  draft), each a persistent STATE buffer of `rows` page-sized records [rows, T, kv_heads, head_dim]
  in the cache plane's dtype, and the CONTINUATION history region naming them all. A row holds one
  request's partial page of every plane at once: snapshot row r of plane q is `continuation[q][r]`.
- `restoration_program`: the RESTORATION program of one batch capacity B. Each lane names its slot,
  its consumed-token endpoint E, and a continuation row to write (SNAPSHOT_DESTINATION) or to read
  (RESTORE_SOURCE), -1 for none. For every plane it snapshots the page holding position E into the
  destination row (`page_snapshot`), then restores the source row into the page holding E
  (`page_restore`); its completion row echoes the generation, emits nothing and reports E.

Per-lane inputs are submission rows (padding -1 past the round's lanes), never physical request rows:
a physical row of a slot outside the round keeps what an earlier round packed, and a stale row there
would copy a payload again. The completion's endpoint is the physical request row of each lane's slot.

The rows partition (docs/snapshots.md): a core without recurrent state declares state_rows_per_request
0 in every graph (no live state rows), so the continuation planes hold `snapshot_capacity` snapshot
rows and nothing else; a recurrent core (one state row per request) sizes them past its execution
rows, `rows` = slots + snapshot capacity.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.ignition.preparation.contract import (
    PAGE_TABLE_BUFFER,
    Declarations,
    HistoryPlanes,
    TextGeometry,
    _binding,
    admission_inputs,
    state_transfer,
)
from helios.program import ProgramBuilder
from helios.proto import contract_pb2, manifest_pb2

C, M = contract_pb2, manifest_pb2

CONTINUATION_REGION = "continuation"


@dataclass(frozen=True, slots=True)
class ContinuationStorage:
    region: C.HistoryRegion  # the CONTINUATION region naming every continuation plane
    planes: tuple[tuple[str, str, int, tuple[int, ...]], ...]  # (cache plane, continuation plane, dtype, shape)
    rows: int  # snapshot rows


def continuation_storage(decl: Declarations, histories: list[HistoryPlanes], *, rows: int) -> ContinuationStorage:
    """Declare a continuation plane of `rows` records beside each cache plane of `histories`."""
    if rows < 1:
        raise ValueError(f"continuation storage holds at least one row, got {rows}")
    planes = []
    layers: set[int] = set()
    for history in histories:
        for plane, page_shape in history.plane_shapes:
            shape = (rows, *page_shape[1:])
            name = decl.buffer(f"continuation.{plane}", M.BUFFER_ROLE_STATE, history.dtype, shape)
            planes.append((plane, name, history.dtype, shape))
        layers.update(history.region.layers)
    region = C.HistoryRegion(name=CONTINUATION_REGION, kind=C.HISTORY_KIND_CONTINUATION,
                             planes=[name for _, name, _, _ in planes], layers=sorted(layers))
    return ContinuationStorage(region, tuple(planes), rows)


def continuation_accesses(storage: ContinuationStorage) -> list[C.StateAccess]:
    """READ_WRITE state accesses of every continuation plane (one record a row)."""
    accesses = []
    for _, plane, dtype, shape in storage.planes:
        element = 2 if dtype == M.DTYPE_BF16 else 4
        record = element
        for extent in shape[1:]:
            record *= extent
        accesses.append(C.StateAccess(view=C.StateView(buffer=plane, byte_offset=0, row_stride=record,
                                                       byte_extent=record), access=C.ACCESS_READ_WRITE))
    return accesses


def restoration_program(geometry: TextGeometry, decl: Declarations, storage: ContinuationStorage,
                        histories: list[HistoryPlanes], *, graph: str, batch: int, completion_width: int = 1,
                        rank: int = 0, recurrent=None):
    """The RESTORATION program of `batch` lanes and its bindings (see the module docstring); with a
    `recurrent` history (helios.ignition.preparation.recurrent) it also snapshots and restores every
    lane's recurrent state rows."""
    b = ProgramBuilder(graph, rank=rank)
    row = C.INDEXING_SUBMISSION_ROW
    names = {what: decl.buffer(f"restoration_{what}_b{batch}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (batch,))
             for what in ("lane_slot", "endpoint", "restore_source", "snapshot_destination")}
    endpoints = decl.buffer("lane_consumed_endpoint", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (geometry.slots,))
    decl.buffer(PAGE_TABLE_BUFFER, M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (geometry.slots, geometry.max_pages))
    admission = admission_inputs(decl, geometry, b, sampling_decision=False)
    bindings = (
        _binding(names["lane_slot"], C.VALUE_SOURCE_SLOT, row, padding=-1),
        _binding(names["endpoint"], C.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT, row, padding=-1),
        _binding(names["restore_source"], C.VALUE_SOURCE_RESTORE_SOURCE, row, padding=-1),
        _binding(names["snapshot_destination"], C.VALUE_SOURCE_SNAPSHOT_DESTINATION, row, padding=-1),
        _binding(endpoints, C.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT, C.INDEXING_PHYSICAL_REQUEST_ROW),
        _binding(PAGE_TABLE_BUFFER, C.VALUE_SOURCE_PAGE_TABLE, C.INDEXING_PHYSICAL_REQUEST_ROW),
        *admission.bindings,
    )
    lanes = {what: b.transport(what, names[what], "i32", (batch,)) for what in names}
    endpoint_rows = b.transport("consumed_endpoint", endpoints, "i32", (geometry.slots,))
    page_table = b.transport("page_table", PAGE_TABLE_BUFFER, "i32", (geometry.slots, geometry.max_pages))
    history_shapes = {plane: shape for h in histories for plane, shape in h.plane_shapes}
    for cache_plane, continuation_plane, dtype, shape in storage.planes:
        dtype_name = "bf16" if dtype == M.DTYPE_BF16 else "f32"
        cache = b.state(cache_plane, cache_plane, dtype_name, history_shapes[cache_plane])
        continuation = b.state(continuation_plane, continuation_plane, dtype_name, shape)
        b.page_snapshot(continuation, cache, page_table, lanes["lane_slot"], lanes["endpoint"],
                        lanes["snapshot_destination"])
        b.page_restore(cache, continuation, page_table, lanes["lane_slot"], lanes["endpoint"],
                       lanes["restore_source"])
    if recurrent is not None:
        bindings += recurrent.restoration_copies(decl, b, batch=batch,
                                                 snapshot_destination=lanes["snapshot_destination"],
                                                 restore_source=lanes["restore_source"])
    state_transfer(decl, geometry, b, generation=admission.generation, emitted=None, sampled=None,
                   consumed_endpoint=endpoint_rows, width=completion_width)
    return b.build(decl.buffers), bindings
