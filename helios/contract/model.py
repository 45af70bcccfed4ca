"""PreparedContract's typed parts (host side): frozen dataclasses mirroring the wire messages.

Each class converts from and to its Protobuf message without judging it; the rules live in
validate.py. Enum fields hold the mirrored IntEnums of enums.py; a number the runtime does not know
is kept as a plain int so validation can report it with its path.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.contract.enums import (
    Access,
    BufferRole,
    CompletionField,
    DType,
    HistoryKind,
    ImageLayout,
    ImagePreparation,
    Indexing,
    Operation,
    ReasoningParser,
    ToolParser,
    ValueSource,
)
from helios.proto import contract_pb2, manifest_pb2


def _enum(kind, number: int):
    try:
        return kind(number)
    except ValueError:
        return int(number)


def _optional(message, name: str):
    return getattr(message, name) if message.HasField(name) else None


# ----------------------------------------------------------------------------- serving metadata


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None

    @classmethod
    def from_proto(cls, m: contract_pb2.SamplingDefaults) -> SamplingDefaults:
        return cls(**{name: _optional(m, name) for name in cls.__slots__})

    def to_proto(self) -> contract_pb2.SamplingDefaults:
        return contract_pb2.SamplingDefaults(**{n: getattr(self, n) for n in self.__slots__ if getattr(self, n) is not None})


@dataclass(frozen=True, slots=True)
class ServingDefaults:
    sampling: SamplingDefaults
    max_output_tokens: int | None = None
    max_active: int | None = None
    queue_capacity: int | None = None
    frontend_workers: int | None = None
    event_capacity: int | None = None

    _SCALARS = ("max_output_tokens", "max_active", "queue_capacity", "frontend_workers", "event_capacity")

    @classmethod
    def from_proto(cls, m: contract_pb2.ServingDefaults) -> ServingDefaults:
        return cls(SamplingDefaults.from_proto(m.sampling), **{n: _optional(m, n) for n in cls._SCALARS})

    def to_proto(self) -> contract_pb2.ServingDefaults:
        m = contract_pb2.ServingDefaults(sampling=self.sampling.to_proto())
        for name in self._SCALARS:
            if getattr(self, name) is not None:
                setattr(m, name, getattr(self, name))
        return m


@dataclass(frozen=True, slots=True)
class Vocabulary:
    sampled_tokens: int  # sampled ids lie in [0, sampled_tokens)
    logits_width: int  # padded logits row width
    histogram_width: int  # prompt histogram row width
    mask_words: int  # int32 grammar-mask words a row


@dataclass(frozen=True, slots=True)
class InputVocabulary:
    input_tokens: int  # input ids lie in [0, input_tokens)
    image_sentinels: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Vision:
    feature_slots: int
    features_per_window: int
    patches_per_feature: int
    patch_capacities: tuple[int, ...]


# ----------------------------------------------------------------------------- cache


@dataclass(frozen=True, slots=True)
class HistoryRegion:
    name: str
    kind: HistoryKind | int
    planes: tuple[str, ...]
    tokens_per_record: int
    window_tokens: int
    layers: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PageTableView:
    destination: str
    page_offset: int


@dataclass(frozen=True, slots=True)
class Cache:
    page_tokens: int
    histories: tuple[HistoryRegion, ...]
    page_table_views: tuple[PageTableView, ...]


# ----------------------------------------------------------------------------- graphs


@dataclass(frozen=True, slots=True)
class ValueBinding:
    destination: str
    source: ValueSource | int
    indexing: Indexing | int
    offset: int
    padding: int
    constants: tuple[int, ...]
    image_output: str


@dataclass(frozen=True, slots=True)
class StateView:
    buffer: str
    byte_offset: int
    row_stride: int
    byte_extent: int


@dataclass(frozen=True, slots=True)
class StateAccess:
    view: StateView
    access: Access | int


@dataclass(frozen=True, slots=True)
class TunedBinding:
    buffer: str
    producer: str


@dataclass(frozen=True, slots=True)
class Speculative:
    batch_capacity: int  # B
    draft_tokens: int  # D
    verify_tokens: int  # W
    packed_token_capacity: int  # P
    confidence_width: int
    lane_token_limit: int
    draft_capacity: int


@dataclass(frozen=True, slots=True)
class CompletionCursor:
    committed_state: str
    lag_tokens: int


@dataclass(frozen=True, slots=True)
class Graph:
    name: str
    operation: Operation | int
    value_bindings: tuple[ValueBinding, ...]
    state_accesses: tuple[StateAccess, ...]
    tuned_bindings: tuple[TunedBinding, ...]
    resource_dependencies: tuple[str, ...]
    batch_capacity: int  # B
    packed_token_capacity: int  # P
    speculative: Speculative | None
    state_rows_per_request: int
    draft_cursor: CompletionCursor | None  # None: the graph reports -1
    pending_token_state: StateView | None  # None: host-owned (a PENDING_TOKEN binding) or none

    def bindings_of(self, source: ValueSource) -> tuple[ValueBinding, ...]:
        return tuple(b for b in self.value_bindings if b.source == source)

    @property
    def lane_rows(self) -> int:
        """The most target rows one request holds in a round of this graph: one for DECODE, the
        per-request target capacity W for SPECULATIVE, the packed capacity P otherwise (a prompt
        chunk may fill the round)."""
        if self.operation == Operation.DECODE:
            return 1
        if self.operation == Operation.SPECULATIVE and self.speculative is not None:
            return min(self.speculative.verify_tokens, self.packed_token_capacity)
        return self.packed_token_capacity


# ----------------------------------------------------------------------------- frontend


@dataclass(frozen=True, slots=True)
class ToolSyntax:
    opener: str = ""
    closer: str = ""
    invoke_open: str = ""
    invoke_name_close: str = ""
    invoke_close: str = ""
    parameter_open: str = ""
    parameter_name_close: str = ""
    parameter_close: str = ""
    value_open: str = ""
    value_close: str = ""
    separator: str = ""
    wrapping_newlines: bool = False
    parameter_flag_open: str = ""
    parameter_flag_close: str = ""
    string_flag: str = ""
    json_flag: str = ""


@dataclass(frozen=True, slots=True)
class ReasoningSyntax:
    open: str = ""
    close: str = ""
    terminal_marker: str = ""
    wrapping_newlines: bool = False
    recipient_open: str = ""
    reasoning_recipient: str = ""
    content_recipients: tuple[str, ...] = ()
    tool_recipient: str = ""
    tool_recipient_separator: str = ""


@dataclass(frozen=True, slots=True)
class PrefixBoundaryRule:
    role: str
    marker: str


@dataclass(frozen=True, slots=True)
class PromptSyntax:
    assistant_open: str = ""
    message_end: str = ""
    header_start: str = ""
    header_message: str = ""
    internal_end: str = ""
    prefix_boundaries: tuple[PrefixBoundaryRule, ...] = ()


@dataclass(frozen=True, slots=True)
class ImageSettings:
    """The selected image preparation's parameters (all empty with IMAGE_PREPARATION_NONE)."""

    image_size: int = 0
    patch_size: int = 0
    mean: tuple[float, ...] = ()
    std: tuple[float, ...] = ()


@dataclass(frozen=True, slots=True)
class Frontend:
    tool_parser: ToolParser | int
    reasoning_parser: ReasoningParser | int
    image_preparation: ImagePreparation | int
    image_layout: ImageLayout | int
    tool_syntax: ToolSyntax
    reasoning_syntax: ReasoningSyntax
    prompt_syntax: PromptSyntax
    eos_token_ids: tuple[int, ...]
    template_tokens: tuple[tuple[str, int], ...]  # (text, id)
    image_feature_ids: tuple[int, ...]
    image_atomic_spans: tuple[tuple[int, int], ...]  # (open id, close id)
    image_settings: ImageSettings = ImageSettings()


# ----------------------------------------------------------------------------- engram


@dataclass(frozen=True, slots=True)
class EngramTable:
    """A hashed n-gram embedding table kept in host memory (docs/engram.md)."""

    name: str
    resource: str  # WEIGHT resource: [rows, width] elements of the staging buffer's dtype
    rows: int
    width: int
    orders: tuple[int, ...]  # n-gram orders, ascending
    multipliers: tuple[int, ...]  # orders[k] odd multipliers for order k, concatenated
    staging: str  # TRANSPORT buffer [2, S, width]
    row_index: str  # TRANSPORT buffer [P, len(orders)] i32
    graphs: tuple[str, ...]  # the consuming graphs

    @classmethod
    def from_proto(cls, m: contract_pb2.EngramTable) -> EngramTable:
        return cls(m.name, m.resource, m.rows, m.width, tuple(m.orders), tuple(m.multipliers), m.staging,
                   m.row_index, tuple(m.graphs))

    def to_proto(self) -> contract_pb2.EngramTable:
        return contract_pb2.EngramTable(name=self.name, resource=self.resource, rows=self.rows, width=self.width,
                                        orders=list(self.orders), multipliers=list(self.multipliers),
                                        staging=self.staging, row_index=self.row_index, graphs=list(self.graphs))


# ----------------------------------------------------------------------------- manifest


@dataclass(frozen=True, slots=True)
class Buffer:
    name: str
    role: BufferRole | int
    dtype: DType | int
    shape: tuple[int, ...]
    per_frame: bool
    producer: str


@dataclass(frozen=True, slots=True)
class GraphHandle:
    name: str
    operation: Operation | int
    program_resources: tuple[str, ...]  # one PROGRAM resource id per rank
    batch_capacity: int
    packed_token_capacity: int


@dataclass(frozen=True, slots=True)
class Manifest:
    abi_label: str
    ranks: int
    buffers: tuple[Buffer, ...]
    graphs: tuple[GraphHandle, ...]
    frames: int
    completion: tuple[tuple[CompletionField | int, str], ...]  # (field, buffer)
    tuning_catalog: tuple[GraphHandle, ...]

    def buffer(self, name: str) -> Buffer | None:
        return next((b for b in self.buffers if b.name == name), None)


def manifest_from_proto(m: manifest_pb2.ExecutionManifest) -> Manifest:
    def handle(h: manifest_pb2.GraphHandle) -> GraphHandle:
        return GraphHandle(h.name, _enum(Operation, h.operation), tuple(h.program_resources),
                           h.batch_capacity, h.packed_token_capacity)

    return Manifest(
        abi_label=m.abi_label,
        ranks=m.ranks,
        buffers=tuple(Buffer(b.name, _enum(BufferRole, b.role), _enum(DType, b.dtype), tuple(b.shape),
                             b.per_frame, b.producer) for b in m.buffers),
        graphs=tuple(handle(h) for h in m.graphs),
        frames=m.transport.frames,
        completion=tuple((_enum(CompletionField, s.field), s.buffer) for s in m.completion.fields),
        tuning_catalog=tuple(handle(h) for h in m.tuning_catalog),
    )


def manifest_to_proto(m: Manifest) -> manifest_pb2.ExecutionManifest:
    def handle(h: GraphHandle) -> manifest_pb2.GraphHandle:
        return manifest_pb2.GraphHandle(name=h.name, operation=int(h.operation),
                                        program_resources=list(h.program_resources),
                                        batch_capacity=h.batch_capacity,
                                        packed_token_capacity=h.packed_token_capacity)

    return manifest_pb2.ExecutionManifest(
        abi_label=m.abi_label,
        ranks=m.ranks,
        buffers=[manifest_pb2.BufferDescriptor(name=b.name, role=int(b.role), dtype=int(b.dtype), shape=list(b.shape),
                                               per_frame=b.per_frame, producer=b.producer) for b in m.buffers],
        graphs=[handle(h) for h in m.graphs],
        transport=manifest_pb2.TransportDescriptor(frames=m.frames),
        completion=manifest_pb2.CompletionLayout(
            fields=[manifest_pb2.CompletionSlot(field=int(f), buffer=b) for f, b in m.completion]),
        tuning_catalog=[handle(h) for h in m.tuning_catalog],
    )
