from helios.proto import manifest_pb2 as _manifest_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TENSOR_ROLE_UNSPECIFIED: _ClassVar[TensorRole]
    TENSOR_ROLE_WEIGHT: _ClassVar[TensorRole]
    TENSOR_ROLE_TRANSPORT: _ClassVar[TensorRole]
    TENSOR_ROLE_STATE: _ClassVar[TensorRole]
    TENSOR_ROLE_SCRATCH: _ClassVar[TensorRole]
    TENSOR_ROLE_COMPLETION: _ClassVar[TensorRole]
    TENSOR_ROLE_TUNED: _ClassVar[TensorRole]
TENSOR_ROLE_UNSPECIFIED: TensorRole
TENSOR_ROLE_WEIGHT: TensorRole
TENSOR_ROLE_TRANSPORT: TensorRole
TENSOR_ROLE_STATE: TensorRole
TENSOR_ROLE_SCRATCH: TensorRole
TENSOR_ROLE_COMPLETION: TensorRole
TENSOR_ROLE_TUNED: TensorRole

class Program(_message.Message):
    __slots__ = ("operator_set_version", "graph", "rank", "tensors", "operators")
    OPERATOR_SET_VERSION_FIELD_NUMBER: _ClassVar[int]
    GRAPH_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    OPERATORS_FIELD_NUMBER: _ClassVar[int]
    operator_set_version: int
    graph: str
    rank: int
    tensors: _containers.RepeatedCompositeFieldContainer[TensorDecl]
    operators: _containers.RepeatedCompositeFieldContainer[Operator]
    def __init__(self, operator_set_version: _Optional[int] = ..., graph: _Optional[str] = ..., rank: _Optional[int] = ..., tensors: _Optional[_Iterable[_Union[TensorDecl, _Mapping]]] = ..., operators: _Optional[_Iterable[_Union[Operator, _Mapping]]] = ...) -> None: ...

class TensorDecl(_message.Message):
    __slots__ = ("name", "role", "dtype", "shape", "buffer", "resource")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    BUFFER_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    role: TensorRole
    dtype: _manifest_pb2.DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    buffer: str
    resource: str
    def __init__(self, name: _Optional[str] = ..., role: _Optional[_Union[TensorRole, str]] = ..., dtype: _Optional[_Union[_manifest_pb2.DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., buffer: _Optional[str] = ..., resource: _Optional[str] = ...) -> None: ...

class Operator(_message.Message):
    __slots__ = ("op", "inputs", "outputs", "attributes")
    OP_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    op: str
    inputs: _containers.RepeatedScalarFieldContainer[str]
    outputs: _containers.RepeatedScalarFieldContainer[str]
    attributes: _containers.RepeatedCompositeFieldContainer[Attribute]
    def __init__(self, op: _Optional[str] = ..., inputs: _Optional[_Iterable[str]] = ..., outputs: _Optional[_Iterable[str]] = ..., attributes: _Optional[_Iterable[_Union[Attribute, _Mapping]]] = ...) -> None: ...

class Attribute(_message.Message):
    __slots__ = ("name", "i", "f", "s", "b", "ints", "floats")
    NAME_FIELD_NUMBER: _ClassVar[int]
    I_FIELD_NUMBER: _ClassVar[int]
    F_FIELD_NUMBER: _ClassVar[int]
    S_FIELD_NUMBER: _ClassVar[int]
    B_FIELD_NUMBER: _ClassVar[int]
    INTS_FIELD_NUMBER: _ClassVar[int]
    FLOATS_FIELD_NUMBER: _ClassVar[int]
    name: str
    i: int
    f: float
    s: str
    b: bool
    ints: IntList
    floats: FloatList
    def __init__(self, name: _Optional[str] = ..., i: _Optional[int] = ..., f: _Optional[float] = ..., s: _Optional[str] = ..., b: _Optional[bool] = ..., ints: _Optional[_Union[IntList, _Mapping]] = ..., floats: _Optional[_Union[FloatList, _Mapping]] = ...) -> None: ...

class IntList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class FloatList(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, values: _Optional[_Iterable[float]] = ...) -> None: ...
