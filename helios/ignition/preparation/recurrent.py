"""Recurrent histories at preparation (preparation side, host): reusable declarations.

- `recurrent_history`: one STATE plane per recurrent layer, `[rows, *record]` in the cache dtype, and
  the RECURRENT history region naming them. Rows follow the specification's partition
  (docs/snapshots.md, docs/recurrent.md): with one state row per request, rows `[0, S)` are the live
  rows of the request slots (row = slot), the next `snapshot_capacity` rows are snapshot rows.
- `RecurrentHistory.live_rows`: the LIVE_STATE_ROWS transport of a text program (a physical request
  row per slot) and its binding; `restoration_copies`: what a RESTORATION program adds for every
  plane, the snapshot copy (live row -> SNAPSHOT_DESTINATION) and the restore copy (RESTORE_SOURCE ->
  live row) with `state_row_copy`, on submission rows padded -1.

The state itself is written only by the captured programs (`short_convolution` in the recipe's text
programs, `state_row_copy` in RESTORATION); the host only names rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.ignition.preparation.contract import Declarations, TextGeometry, _binding
from helios.program import ProgramBuilder
from helios.proto import contract_pb2, manifest_pb2

C, M = contract_pb2, manifest_pb2

RECURRENT_REGION = "recurrent_state"
STATE_ROWS_PER_REQUEST = 1
LIVE_STATE_ROWS_BUFFER = "lane_state_rows"


@dataclass(frozen=True, slots=True)
class RecurrentHistory:
    region: C.HistoryRegion
    planes: dict[int, str]  # layer -> STATE buffer
    dtype: int
    shape: tuple[int, ...]  # [rows, *record]
    slots: int

    @property
    def dtype_name(self) -> str:
        return "bf16" if self.dtype == M.DTYPE_BF16 else "f32"

    def state(self, b: ProgramBuilder, layer: int) -> str:
        """The program tensor of `layer`'s state plane (declared once a program)."""
        name = self.planes[layer]
        return name if b.declared(name) else b.state(name, name, self.dtype_name, self.shape)

    def live_rows(self, decl: Declarations, b: ProgramBuilder) -> str:
        """The [S] i32 live state row of each request slot (LIVE_STATE_ROWS, physical request rows)."""
        decl.buffer(LIVE_STATE_ROWS_BUFFER, M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (self.slots,))
        if b.declared("state_rows"):
            return "state_rows"
        return b.transport("state_rows", LIVE_STATE_ROWS_BUFFER, "i32", (self.slots,))

    @property
    def bindings(self) -> tuple[C.ValueBinding, ...]:
        return (_binding(LIVE_STATE_ROWS_BUFFER, C.VALUE_SOURCE_LIVE_STATE_ROWS, C.INDEXING_PHYSICAL_REQUEST_ROW),)

    def accesses(self) -> list[C.StateAccess]:
        """READ_WRITE accesses of every plane, one state row a record."""
        element = 2 if self.dtype == M.DTYPE_BF16 else 4
        record = element
        for extent in self.shape[1:]:
            record *= extent
        return [C.StateAccess(view=C.StateView(buffer=plane, byte_offset=0, row_stride=record, byte_extent=record),
                              access=C.ACCESS_READ_WRITE) for plane in self.planes.values()]

    def restoration_copies(self, decl: Declarations, b: ProgramBuilder, *, batch: int, snapshot_destination: str,
                           restore_source: str) -> tuple[C.ValueBinding, ...]:
        """Snapshot each lane's live rows into its destination row, then restore its source row into
        its live rows, for every plane; returns the bindings it adds."""
        name = decl.buffer(f"restoration_state_rows_b{batch}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (batch,))
        live = b.transport("live_state_rows", name, "i32", (batch,))
        for layer in self.planes:
            state = self.state(b, layer)
            b.state_row_copy(state, live, snapshot_destination)
            b.state_row_copy(state, restore_source, live)
        return (_binding(name, C.VALUE_SOURCE_LIVE_STATE_ROWS, C.INDEXING_SUBMISSION_ROW, padding=-1),)


def recurrent_history(decl: Declarations, geometry: TextGeometry, *, layers: list[int], record: tuple[int, ...],
                      dtype: int, snapshot_rows: int) -> RecurrentHistory:
    """The state planes of `layers` (each row one request's `record`) and their RECURRENT region."""
    rows = geometry.slots * STATE_ROWS_PER_REQUEST + snapshot_rows
    shape = (rows, *record)
    planes = {layer: decl.buffer(f"layer{layer}.state", M.BUFFER_ROLE_STATE, dtype, shape) for layer in layers}
    region = C.HistoryRegion(name=RECURRENT_REGION, kind=C.HISTORY_KIND_RECURRENT, planes=list(planes.values()),
                             tokens_per_record=0, layers=list(layers))
    return RecurrentHistory(region, planes, dtype, shape, geometry.slots)
