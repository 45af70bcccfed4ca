"""The contract declarations of a SPECULATIVE program (preparation side, host).

`speculative_inputs` registers what one complete speculative program of batch capacity B reads:
the lanes in submission order (`lane_order`, each row's physical slot, -1 on padding rows), each
lane's consumed-token endpoint once per draft pass (the pass's position: the endpoint plus the
pass index, a binding offset), each lane's target length (QUERY_LENGTH) or ceiling
(SPECULATIVE_PREFIX_LIMIT), the shared page table, the device-owned pending tokens and, in a graph
that draws proposals, the copied-token inputs history drafting feeds (CANDIDATE_IDS and
CANDIDATE_COUNT: the host's proposals for each lane, used before the draft's own) and their
per-position grammar masks (CANDIDATE_GRAMMAR_MASKS [B, W, mask_words]: row k the ids a constrained
lane's grammar allows after its pending token and first k proposals; all ones for other lanes). Every
per-lane input is indexed by submission row, so nothing stale of another slot is read.
`SpeculativeInputs.publish_confidence` writes the proposal confidence into its framed storage
(`proposal_confidence[frame, b, :]`, rows in lane order), and `complete` writes the completion
record: offers, accepted drafts, emitted ids and count, consumed endpoint and draft cursor (lag 0:
the draft's history is valid exactly to the endpoint).
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.contract.validate import CONFIDENCE_BUFFER
from helios.ignition.preparation.contract import (
    PAGE_TABLE_BUFFER,
    PENDING_TOKEN_BUFFER,
    Declarations,
    TextGeometry,
    _binding,
    completion_tensors,
)
from helios.program import ProgramBuilder
from helios.proto import contract_pb2, manifest_pb2

C, M = contract_pb2, manifest_pb2


@dataclass(frozen=True, slots=True)
class SpeculativeInputs:
    lane_order: str  # [B] i32: each submission row's physical slot, -1 on padding rows
    consumed: str  # [B] i32: each lane's consumed-token endpoint (its pending token's position)
    pass_positions: tuple[str, ...]  # per draft pass j: [B] i32 consumed + j
    limits: str  # [B] i32: each lane's target length (QUERY_LENGTH) or ceiling (SPECULATIVE_PREFIX_LIMIT)
    page_table: str  # [S, max_pages] i32
    pending_state: str  # [S] i32 STATE: the device-owned pending tokens
    copied_ids: str | None  # [B, D] i32: each lane's copied proposals (history drafting), -1 past them
    copied_count: str | None  # [B] i32: how many of them the host supplied (0: the draft proposes)
    candidate_masks: str | None  # [B, W, mask_words] i32: each lane's per-position grammar masks
    rows: str | None  # [S] i32: 0 .. B-1 then -1 (the confidence storage's lane-order rows)
    confidence_state: str | None  # [2, S, capacity] f32 STATE: proposal_confidence
    geometry: TextGeometry
    bindings: tuple[C.ValueBinding, ...]

    def publish_confidence(self, b: ProgramBuilder, scores: str) -> None:
        """proposal_confidence[frame] = the round's confidences, rows in lane order (zero past them)."""
        assert self.rows is not None and self.confidence_state is not None
        slots, capacity = self.geometry.slots, b.type_of(scores).shape[1]
        framed = b.gather(scores, self.rows, name="confidence_rows")
        record = b.copy(framed, into=b.scratch("confidence_record", "f32", (1, slots, capacity)))
        frame = b.completion("completion.frame_index", "completion.frame_index", "i32", (1,))
        b.scatter(record, frame, into=self.confidence_state)

    def complete(self, b: ProgramBuilder, *, generation: str, ids: str, offers: str, accepted: str, emitted: str,
                 endpoint: str, width: int) -> None:
        tensors = completion_tensors(b, self.geometry, width, speculative=True)
        b.copy(generation, into=tensors["completion.generation"])
        for name, value in (("completion.sampled_ids", ids), ("completion.offers", offers),
                            ("completion.accepted_drafts", accepted), ("completion.emitted", emitted),
                            ("completion.consumed_endpoint", endpoint), ("completion.draft_cursor", endpoint)):
            b.scatter(value, self.lane_order, into=tensors[name])
        b.fill(-1, into=tensors["completion.model_reserved"])
        b.fill(0, into=tensors["completion.status"])


def confidence_buffer(decl: Declarations, geometry: TextGeometry, capacity: int) -> str:
    """proposal_confidence: contiguous FP32 [2, request_slots, draft_capacity], framed by frame index."""
    return decl.buffer(CONFIDENCE_BUFFER, M.BUFFER_ROLE_STATE, M.DTYPE_F32, (2, geometry.slots, capacity))


def speculative_inputs(decl: Declarations, geometry: TextGeometry, b: ProgramBuilder, *, batch: int, passes: int,
                       drafts: int, width: int, confidence: bool, confidence_capacity: int = 0) -> SpeculativeInputs:
    row = C.INDEXING_SUBMISSION_ROW
    lane_buffer = decl.buffer(f"spec_lane_order_b{batch}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (batch,))
    bindings = [_binding(lane_buffer, C.VALUE_SOURCE_SLOT, row, padding=-1)]
    positions = []
    for j in range(max(passes, 1)):
        buffer = decl.buffer(f"spec_position_b{batch}_o{j}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (batch,))
        bindings.append(_binding(buffer, C.VALUE_SOURCE_CONSUMED_TOKEN_ENDPOINT, row, offset=j))
        positions.append(b.transport(f"pass{j}_positions", buffer, "i32", (batch,)))
    source, what = ((C.VALUE_SOURCE_SPECULATIVE_PREFIX_LIMIT, "prefix_limit") if confidence
                    else (C.VALUE_SOURCE_QUERY_LENGTH, "query_length"))
    limit_buffer = decl.buffer(f"spec_{what}_b{batch}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (batch,))
    bindings.append(_binding(limit_buffer, source, row))
    decl.buffer(PAGE_TABLE_BUFFER, M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (geometry.slots, geometry.max_pages))
    bindings.append(_binding(PAGE_TABLE_BUFFER, C.VALUE_SOURCE_PAGE_TABLE, C.INDEXING_PHYSICAL_REQUEST_ROW))
    pending_buffer = decl.buffer(PENDING_TOKEN_BUFFER, M.BUFFER_ROLE_STATE, M.DTYPE_I32, (geometry.slots,))
    copied_ids = copied_count = candidate_masks = None
    if drafts > 0:  # a wider graph: concrete copied-token inputs, so history drafting can feed it
        ids_buffer = decl.buffer(f"spec_copied_ids_b{batch}_d{drafts}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32,
                                 (batch, drafts))
        count_buffer = decl.buffer(f"spec_copied_count_b{batch}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (batch,))
        bindings += [_binding(ids_buffer, C.VALUE_SOURCE_CANDIDATE_IDS, row, padding=-1),
                     _binding(count_buffer, C.VALUE_SOURCE_CANDIDATE_COUNT, row)]
        copied_ids = b.transport("copied_ids", ids_buffer, "i32", (batch, drafts))
        copied_count = b.transport("copied_count", count_buffer, "i32", (batch,))
        shape = (batch, width, geometry.mask_words)
        masks_buffer = decl.buffer(f"spec_candidate_masks_b{batch}_w{width}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32,
                                   shape)
        bindings.append(_binding(masks_buffer, C.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS, row, padding=-1))
        candidate_masks = b.transport("candidate_grammar_masks", masks_buffer, "i32", shape)
    rows = state = None
    if confidence:
        rows_buffer = decl.buffer(f"spec_rows_b{batch}", M.BUFFER_ROLE_TRANSPORT, M.DTYPE_I32, (geometry.slots,))
        constants = [*range(batch), *([-1] * (geometry.slots - batch))]
        bindings.append(C.ValueBinding(destination=rows_buffer, source=C.VALUE_SOURCE_CONSTANT,
                                       indexing=C.INDEXING_SCALAR, constants=constants))
        rows = b.transport("confidence_row_of_lane", rows_buffer, "i32", (geometry.slots,))
        storage = confidence_buffer(decl, geometry, confidence_capacity)
        state = b.state("proposal_confidence", storage, "f32", (2, geometry.slots, confidence_capacity))
    return SpeculativeInputs(
        lane_order=b.transport("lane_order", lane_buffer, "i32", (batch,)),
        consumed=positions[0],
        pass_positions=tuple(positions[:passes]),
        limits=b.transport(f"lane_{what}", limit_buffer, "i32", (batch,)),
        page_table=b.transport("page_table", PAGE_TABLE_BUFFER, "i32", (geometry.slots, geometry.max_pages)),
        pending_state=b.state("pending_tokens", pending_buffer, "i32", (geometry.slots,)),
        copied_ids=copied_ids, copied_count=copied_count, candidate_masks=candidate_masks, rows=rows, confidence_state=state, geometry=geometry, bindings=tuple(bindings))
