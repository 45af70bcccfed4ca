"""Python enums mirroring the wire enums (host side).

Built from the Protobuf descriptors so the numbers and names have one source: `Operation.DECODE`
is `contract_pb2.OPERATION_DECODE`. The unspecified zero value is kept (as `UNSPECIFIED`) so a decoded
field can be compared against it; it never selects an implementation.
"""

from __future__ import annotations

import enum

from helios.proto import contract_pb2, manifest_pb2, program_pb2


def _mirror(name: str, descriptor, prefix: str) -> type[enum.IntEnum]:
    members = {value.name.removeprefix(prefix): value.number for value in descriptor.values}
    return enum.IntEnum(name, members)


Operation = _mirror("Operation", contract_pb2.Operation.DESCRIPTOR, "OPERATION_")
HistoryKind = _mirror("HistoryKind", contract_pb2.HistoryKind.DESCRIPTOR, "HISTORY_KIND_")
ValueSource = _mirror("ValueSource", contract_pb2.ValueSource.DESCRIPTOR, "VALUE_SOURCE_")
Indexing = _mirror("Indexing", contract_pb2.Indexing.DESCRIPTOR, "INDEXING_")
Access = _mirror("Access", contract_pb2.Access.DESCRIPTOR, "ACCESS_")
ToolParser = _mirror("ToolParser", contract_pb2.ToolParser.DESCRIPTOR, "TOOL_PARSER_")
ReasoningParser = _mirror("ReasoningParser", contract_pb2.ReasoningParser.DESCRIPTOR, "REASONING_PARSER_")
ImagePreparation = _mirror("ImagePreparation", contract_pb2.ImagePreparation.DESCRIPTOR, "IMAGE_PREPARATION_")
ImageLayout = _mirror("ImageLayout", contract_pb2.ImageLayout.DESCRIPTOR, "IMAGE_LAYOUT_")
DType = _mirror("DType", manifest_pb2.DType.DESCRIPTOR, "DTYPE_")
BufferRole = _mirror("BufferRole", manifest_pb2.BufferRole.DESCRIPTOR, "BUFFER_ROLE_")
CompletionField = _mirror("CompletionField", manifest_pb2.CompletionField.DESCRIPTOR, "COMPLETION_FIELD_")
TensorRole = _mirror("TensorRole", program_pb2.TensorRole.DESCRIPTOR, "TENSOR_ROLE_")

# Bytes per element of each dtype.
DTYPE_NBYTES = {
    DType.F32: 4, DType.BF16: 2, DType.F16: 2, DType.I32: 4, DType.I64: 8,
    DType.U8: 1, DType.U32: 4, DType.F64: 8,
}

# Sources that carry a speculative program's per-lane lengths; exactly one is bound.
LENGTH_SOURCES = frozenset({ValueSource.QUERY_LENGTH, ValueSource.SPECULATIVE_PREFIX_LIMIT})
# Sources of copied proposals (history drafting inputs).
COPIED_TOKEN_SOURCES = frozenset({ValueSource.CANDIDATE_IDS, ValueSource.CANDIDATE_COUNT})
# Every copied-proposal source: the copied tokens and what a runtime needs beside them.
COPIED_PROPOSAL_SOURCES = COPIED_TOKEN_SOURCES | {ValueSource.CANDIDATE_GENERATION,
                                                  ValueSource.CANDIDATE_CONSUMED_ENDPOINT,
                                                  ValueSource.CANDIDATE_GRAMMAR_MASKS}
