"""The completion record as the production executor reads it back and checks it (host side of the
device seam; no torch: the read-back arrives as tensors the caller copied, read through `.numpy()`).

    rows = read_rows(readback, slots, count)          # CompletionRows: one int64 column per field
    validate_rows(graph, lanes, rows, lane_columns, sequence=s, sampled_tokens=v)

Every lane's row is checked before any token is accepted: status 0, the transport's submission
sequence, the slot generation echoed, emitted equal to the lane's sampling decision, the consumed
endpoint after the lane's tokens, draft cursor -1 (no graph has one), the reserved model field -1,
and a sampled id inside the vocabulary. A whole cohort is checked by array comparisons; a failing
one is checked lane by lane so that the error names the first bad lane and field
(`CompletionInvalid`). `executor.py` re-exports `CompletionInvalid`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from helios.errors import HeliosError
from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.completion import Completion, CompletionRows, transport_sequence
from helios.runtime.packing import LaneColumns, LaneInput

V, M = contract_pb2, manifest_pb2

# Completion fields in the order of `Completion`'s attributes, and those attributes.
FIELD_ORDER = (
    M.COMPLETION_FIELD_FRAME_INDEX, M.COMPLETION_FIELD_SUBMISSION_SEQUENCE, M.COMPLETION_FIELD_GENERATION,
    M.COMPLETION_FIELD_SAMPLED_IDS, M.COMPLETION_FIELD_EMITTED, M.COMPLETION_FIELD_CONSUMED_ENDPOINT,
    M.COMPLETION_FIELD_DRAFT_CURSOR, M.COMPLETION_FIELD_MODEL_RESERVED, M.COMPLETION_FIELD_STATUS,
)
FIELD_NAMES = ("frame_index", "submission_sequence", "generation", "sampled_id", "emitted", "consumed_endpoint",
               "draft_cursor", "model_reserved", "status")


class CompletionInvalid(HeliosError):
    """A completion row disagrees with the round it answers (an execution failure)."""


def read_rows(readback: Mapping[int, Any], slots: np.ndarray, count: int) -> CompletionRows:
    """The rows of `count` lanes in request slots `slots` from the host read-back of each completion
    field (tensors on the host); a field the core omits reads as a graph without it reports (-1 for
    the draft cursor and the reserved field, 0 otherwise); a one-row field is the whole round's."""
    columns = {}
    for field, name in zip(FIELD_ORDER, FIELD_NAMES, strict=True):
        host = readback.get(field)
        if host is None:
            value = -1 if field in (M.COMPLETION_FIELD_DRAFT_CURSOR, M.COMPLETION_FIELD_MODEL_RESERVED) else 0
            columns[name] = np.full(count, value, dtype=np.int64)
            continue
        array = host.numpy().reshape(host.shape[0], -1)
        columns[name] = np.full(count, array[0, 0], dtype=np.int64) if array.shape[0] == 1 else array[slots, 0]
    return CompletionRows(columns)


def validate_rows(graph_name: str, lanes: Sequence[LaneInput], rows: Sequence[Completion],
                  lane_columns: Callable[[Sequence[LaneInput]], LaneColumns], *, sequence: int,
                  sampled_tokens: int) -> None:
    """The checks of `validate_row` for a whole cohort at once (array comparisons over read-back
    columns; `lane_columns(lanes)` gives the lanes as columns); the first failing lane is reported."""
    if not isinstance(rows, CompletionRows):
        rows = CompletionRows({name: np.array([getattr(r, name) for r in rows], dtype=np.int64)
                               for name in FIELD_NAMES})
    if lanes and len(rows) == len(lanes):
        lane = lane_columns(lanes)
        c = rows.column
        endpoint = lane.scalar(V.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT) + lane.lengths
        emitted, sampled = c("emitted"), c("sampled_id")
        ok = ((c("status") == 0) & (c("submission_sequence") == transport_sequence(sequence))
              & (c("generation") == lane.scalar(V.VALUE_SOURCE_GENERATION))
              & (emitted == lane.scalar(V.VALUE_SOURCE_SAMPLING_DECISION))
              & (c("consumed_endpoint") == endpoint) & (c("draft_cursor") == -1) & (c("model_reserved") == -1)
              & ((emitted == 0) | ((sampled >= 0) & (sampled < sampled_tokens))))
        if ok.all():
            return
    for lane_input, row in zip(lanes, rows, strict=True):
        validate_row(graph_name, lane_input, row, sequence=sequence, sampled_tokens=sampled_tokens)


def validate_row(graph_name: str, lane: LaneInput, row: Completion, *, sequence: int, sampled_tokens: int) -> None:
    """Reject a completion row that disagrees with the lane's round (submitted as transport sequence
    `sequence`), before any token is accepted."""
    where = f"graph {graph_name}, slot {lane.slot}"
    expected_endpoint = lane.consumed + len(lane.tokens)
    checks = (
        (row.status == 0, f"status {row.status} (execution failed)"),
        (row.submission_sequence == transport_sequence(sequence),
         f"submission sequence {row.submission_sequence}, submitted {transport_sequence(sequence)}"),
        (row.generation == lane.generation, f"generation echo {row.generation}, lane generation {lane.generation}"),
        (row.emitted == int(lane.samples), f"emitted {row.emitted}, expected {int(lane.samples)}"),
        (row.consumed_endpoint == expected_endpoint,
         f"consumed endpoint {row.consumed_endpoint}, expected {expected_endpoint}"),
        (row.draft_cursor == -1, f"draft cursor {row.draft_cursor}; a graph without one reports -1"),
        (row.model_reserved == -1, f"reserved model field {row.model_reserved}, must be -1"),
    )
    for ok, message in checks:
        if not ok:
            raise CompletionInvalid(f"{where}: {message}")
    if row.emitted and not 0 <= row.sampled_id < sampled_tokens:
        raise CompletionInvalid(f"{where}: sampled id {row.sampled_id} outside the vocabulary "
                                f"[0, {sampled_tokens})")
