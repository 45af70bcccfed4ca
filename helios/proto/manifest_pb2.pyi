from helios.proto import contract_pb2 as _contract_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class DType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DTYPE_UNSPECIFIED: _ClassVar[DType]
    DTYPE_F32: _ClassVar[DType]
    DTYPE_BF16: _ClassVar[DType]
    DTYPE_F16: _ClassVar[DType]
    DTYPE_I32: _ClassVar[DType]
    DTYPE_I64: _ClassVar[DType]
    DTYPE_U8: _ClassVar[DType]
    DTYPE_U32: _ClassVar[DType]
    DTYPE_F64: _ClassVar[DType]

class BufferRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BUFFER_ROLE_UNSPECIFIED: _ClassVar[BufferRole]
    BUFFER_ROLE_TRANSPORT: _ClassVar[BufferRole]
    BUFFER_ROLE_STATE: _ClassVar[BufferRole]
    BUFFER_ROLE_CACHE: _ClassVar[BufferRole]
    BUFFER_ROLE_SCRATCH: _ClassVar[BufferRole]
    BUFFER_ROLE_COMPLETION: _ClassVar[BufferRole]
    BUFFER_ROLE_TUNED: _ClassVar[BufferRole]

class CompletionField(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPLETION_FIELD_UNSPECIFIED: _ClassVar[CompletionField]
    COMPLETION_FIELD_FRAME_INDEX: _ClassVar[CompletionField]
    COMPLETION_FIELD_SUBMISSION_SEQUENCE: _ClassVar[CompletionField]
    COMPLETION_FIELD_GENERATION: _ClassVar[CompletionField]
    COMPLETION_FIELD_SAMPLED_IDS: _ClassVar[CompletionField]
    COMPLETION_FIELD_OFFERS: _ClassVar[CompletionField]
    COMPLETION_FIELD_ACCEPTED_DRAFTS: _ClassVar[CompletionField]
    COMPLETION_FIELD_EMITTED: _ClassVar[CompletionField]
    COMPLETION_FIELD_CONSUMED_ENDPOINT: _ClassVar[CompletionField]
    COMPLETION_FIELD_DRAFT_CURSOR: _ClassVar[CompletionField]
    COMPLETION_FIELD_MODEL_RESERVED: _ClassVar[CompletionField]
    COMPLETION_FIELD_STATUS: _ClassVar[CompletionField]
    COMPLETION_FIELD_PROMPT_SCORES: _ClassVar[CompletionField]
    COMPLETION_FIELD_PROMPT_SCORE_IDS: _ClassVar[CompletionField]
DTYPE_UNSPECIFIED: DType
DTYPE_F32: DType
DTYPE_BF16: DType
DTYPE_F16: DType
DTYPE_I32: DType
DTYPE_I64: DType
DTYPE_U8: DType
DTYPE_U32: DType
DTYPE_F64: DType
BUFFER_ROLE_UNSPECIFIED: BufferRole
BUFFER_ROLE_TRANSPORT: BufferRole
BUFFER_ROLE_STATE: BufferRole
BUFFER_ROLE_CACHE: BufferRole
BUFFER_ROLE_SCRATCH: BufferRole
BUFFER_ROLE_COMPLETION: BufferRole
BUFFER_ROLE_TUNED: BufferRole
COMPLETION_FIELD_UNSPECIFIED: CompletionField
COMPLETION_FIELD_FRAME_INDEX: CompletionField
COMPLETION_FIELD_SUBMISSION_SEQUENCE: CompletionField
COMPLETION_FIELD_GENERATION: CompletionField
COMPLETION_FIELD_SAMPLED_IDS: CompletionField
COMPLETION_FIELD_OFFERS: CompletionField
COMPLETION_FIELD_ACCEPTED_DRAFTS: CompletionField
COMPLETION_FIELD_EMITTED: CompletionField
COMPLETION_FIELD_CONSUMED_ENDPOINT: CompletionField
COMPLETION_FIELD_DRAFT_CURSOR: CompletionField
COMPLETION_FIELD_MODEL_RESERVED: CompletionField
COMPLETION_FIELD_STATUS: CompletionField
COMPLETION_FIELD_PROMPT_SCORES: CompletionField
COMPLETION_FIELD_PROMPT_SCORE_IDS: CompletionField

class ExecutionManifest(_message.Message):
    __slots__ = ("abi_label", "ranks", "buffers", "graphs", "transport", "completion", "tuning_catalog")
    ABI_LABEL_FIELD_NUMBER: _ClassVar[int]
    RANKS_FIELD_NUMBER: _ClassVar[int]
    BUFFERS_FIELD_NUMBER: _ClassVar[int]
    GRAPHS_FIELD_NUMBER: _ClassVar[int]
    TRANSPORT_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FIELD_NUMBER: _ClassVar[int]
    TUNING_CATALOG_FIELD_NUMBER: _ClassVar[int]
    abi_label: str
    ranks: int
    buffers: _containers.RepeatedCompositeFieldContainer[BufferDescriptor]
    graphs: _containers.RepeatedCompositeFieldContainer[GraphHandle]
    transport: TransportDescriptor
    completion: CompletionLayout
    tuning_catalog: _containers.RepeatedCompositeFieldContainer[GraphHandle]
    def __init__(self, abi_label: _Optional[str] = ..., ranks: _Optional[int] = ..., buffers: _Optional[_Iterable[_Union[BufferDescriptor, _Mapping]]] = ..., graphs: _Optional[_Iterable[_Union[GraphHandle, _Mapping]]] = ..., transport: _Optional[_Union[TransportDescriptor, _Mapping]] = ..., completion: _Optional[_Union[CompletionLayout, _Mapping]] = ..., tuning_catalog: _Optional[_Iterable[_Union[GraphHandle, _Mapping]]] = ...) -> None: ...

class BufferDescriptor(_message.Message):
    __slots__ = ("name", "role", "dtype", "shape", "per_frame", "producer")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    PER_FRAME_FIELD_NUMBER: _ClassVar[int]
    PRODUCER_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: BufferRole
    dtype: DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    per_frame: bool
    producer: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[_Union[BufferRole, str]] = ..., dtype: _Optional[_Union[DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., per_frame: _Optional[bool] = ..., producer: _Optional[str] = ...) -> None: ...

class GraphHandle(_message.Message):
    __slots__ = ("name", "operation", "program_resources", "batch_capacity", "packed_token_capacity")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_RESOURCES_FIELD_NUMBER: _ClassVar[int]
    BATCH_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    PACKED_TOKEN_CAPACITY_FIELD_NUMBER: _ClassVar[int]
    name: str
    operation: _contract_pb2.Operation
    program_resources: _containers.RepeatedScalarFieldContainer[str]
    batch_capacity: int
    packed_token_capacity: int
    def __init__(self, name: _Optional[str] = ..., operation: _Optional[_Union[_contract_pb2.Operation, str]] = ..., program_resources: _Optional[_Iterable[str]] = ..., batch_capacity: _Optional[int] = ..., packed_token_capacity: _Optional[int] = ...) -> None: ...

class TransportDescriptor(_message.Message):
    __slots__ = ("frames",)
    FRAMES_FIELD_NUMBER: _ClassVar[int]
    frames: int
    def __init__(self, frames: _Optional[int] = ...) -> None: ...

class CompletionLayout(_message.Message):
    __slots__ = ("fields",)
    FIELDS_FIELD_NUMBER: _ClassVar[int]
    fields: _containers.RepeatedCompositeFieldContainer[CompletionSlot]
    def __init__(self, fields: _Optional[_Iterable[_Union[CompletionSlot, _Mapping]]] = ...) -> None: ...

class CompletionSlot(_message.Message):
    __slots__ = ("field", "buffer")
    FIELD_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    field: CompletionField
    buffer: str
    def __init__(self, field: _Optional[_Union[CompletionField, str]] = ..., buffer: _Optional[str] = ...) -> None: ...
