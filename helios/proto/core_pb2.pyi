from helios.proto import contract_pb2 as _contract_pb2
from helios.proto import manifest_pb2 as _manifest_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResourceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOURCE_KIND_UNSPECIFIED: _ClassVar[ResourceKind]
    RESOURCE_KIND_PROGRAM: _ClassVar[ResourceKind]
    RESOURCE_KIND_WEIGHT: _ClassVar[ResourceKind]
    RESOURCE_KIND_TOKENIZER: _ClassVar[ResourceKind]
    RESOURCE_KIND_CHAT_TEMPLATE: _ClassVar[ResourceKind]
    RESOURCE_KIND_WEIGHT_CATALOG: _ClassVar[ResourceKind]
    RESOURCE_KIND_REBUILD_MANIFEST: _ClassVar[ResourceKind]
    RESOURCE_KIND_OPAQUE: _ClassVar[ResourceKind]
RESOURCE_KIND_UNSPECIFIED: ResourceKind
RESOURCE_KIND_PROGRAM: ResourceKind
RESOURCE_KIND_WEIGHT: ResourceKind
RESOURCE_KIND_TOKENIZER: ResourceKind
RESOURCE_KIND_CHAT_TEMPLATE: ResourceKind
RESOURCE_KIND_WEIGHT_CATALOG: ResourceKind
RESOURCE_KIND_REBUILD_MANIFEST: ResourceKind
RESOURCE_KIND_OPAQUE: ResourceKind

class CoreBody(_message.Message):
    __slots__ = ("format_version", "signed_envelope", "signature", "public_key", "locations", "signed_index")
    FORMAT_VERSION_FIELD_NUMBER: _ClassVar[int]
    SIGNED_ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    SIGNED_INDEX_FIELD_NUMBER: _ClassVar[int]
    format_version: int
    signed_envelope: bytes
    signature: bytes
    public_key: bytes
    locations: LocationSet
    signed_index: bytes
    def __init__(self, format_version: _Optional[int] = ..., signed_envelope: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., public_key: _Optional[bytes] = ..., locations: _Optional[_Union[LocationSet, _Mapping]] = ..., signed_index: _Optional[bytes] = ...) -> None: ...

class PayloadEnvelope(_message.Message):
    __slots__ = ("publisher_namespace", "resources", "deployment")
    PUBLISHER_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    DEPLOYMENT_FIELD_NUMBER: _ClassVar[int]
    publisher_namespace: str
    resources: _containers.RepeatedCompositeFieldContainer[ExecutableResource]
    deployment: DeploymentBody
    def __init__(self, publisher_namespace: _Optional[str] = ..., resources: _Optional[_Iterable[_Union[ExecutableResource, _Mapping]]] = ..., deployment: _Optional[_Union[DeploymentBody, _Mapping]] = ...) -> None: ...

class ExecutableResource(_message.Message):
    __slots__ = ("id", "kind", "stored_nbytes", "decoded_nbytes", "chunk_nbytes", "chunk_sha256")
    ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STORED_NBYTES_FIELD_NUMBER: _ClassVar[int]
    DECODED_NBYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_NBYTES_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SHA256_FIELD_NUMBER: _ClassVar[int]
    id: str
    kind: ResourceKind
    stored_nbytes: int
    decoded_nbytes: int
    chunk_nbytes: int
    chunk_sha256: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, id: _Optional[str] = ..., kind: _Optional[_Union[ResourceKind, str]] = ..., stored_nbytes: _Optional[int] = ..., decoded_nbytes: _Optional[int] = ..., chunk_nbytes: _Optional[int] = ..., chunk_sha256: _Optional[_Iterable[bytes]] = ...) -> None: ...

class LocationSet(_message.Message):
    __slots__ = ("locations",)
    LOCATIONS_FIELD_NUMBER: _ClassVar[int]
    locations: _containers.RepeatedCompositeFieldContainer[ResourceLocation]
    def __init__(self, locations: _Optional[_Iterable[_Union[ResourceLocation, _Mapping]]] = ...) -> None: ...

class ResourceLocation(_message.Message):
    __slots__ = ("resource_id", "file", "offset", "nbytes")
    RESOURCE_ID_FIELD_NUMBER: _ClassVar[int]
    FILE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    NBYTES_FIELD_NUMBER: _ClassVar[int]
    resource_id: str
    file: str
    offset: int
    nbytes: int
    def __init__(self, resource_id: _Optional[str] = ..., file: _Optional[str] = ..., offset: _Optional[int] = ..., nbytes: _Optional[int] = ...) -> None: ...

class DeploymentBody(_message.Message):
    __slots__ = ("contract", "manifest")
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    contract: _contract_pb2.ServingContract
    manifest: _manifest_pb2.ExecutionManifest
    def __init__(self, contract: _Optional[_Union[_contract_pb2.ServingContract, _Mapping]] = ..., manifest: _Optional[_Union[_manifest_pb2.ExecutionManifest, _Mapping]] = ...) -> None: ...

class ModelIndex(_message.Message):
    __slots__ = ("publisher_namespace", "contract", "manifest", "index")
    PUBLISHER_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CONTRACT_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    publisher_namespace: str
    contract: _contract_pb2.ServingContract
    manifest: _manifest_pb2.ExecutionManifest
    index: ProtectedIndex
    def __init__(self, publisher_namespace: _Optional[str] = ..., contract: _Optional[_Union[_contract_pb2.ServingContract, _Mapping]] = ..., manifest: _Optional[_Union[_manifest_pb2.ExecutionManifest, _Mapping]] = ..., index: _Optional[_Union[ProtectedIndex, _Mapping]] = ...) -> None: ...

class ProtectedIndex(_message.Message):
    __slots__ = ("version", "resources", "encrypted_chunk_nbytes", "protection_key_id")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCES_FIELD_NUMBER: _ClassVar[int]
    ENCRYPTED_CHUNK_NBYTES_FIELD_NUMBER: _ClassVar[int]
    PROTECTION_KEY_ID_FIELD_NUMBER: _ClassVar[int]
    version: int
    resources: _containers.RepeatedCompositeFieldContainer[ExecutableResource]
    encrypted_chunk_nbytes: int
    protection_key_id: bytes
    def __init__(self, version: _Optional[int] = ..., resources: _Optional[_Iterable[_Union[ExecutableResource, _Mapping]]] = ..., encrypted_chunk_nbytes: _Optional[int] = ..., protection_key_id: _Optional[bytes] = ...) -> None: ...

class WeightCatalog(_message.Message):
    __slots__ = ("version", "rank", "entries")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    version: int
    rank: int
    entries: _containers.RepeatedCompositeFieldContainer[WeightEntry]
    def __init__(self, version: _Optional[int] = ..., rank: _Optional[int] = ..., entries: _Optional[_Iterable[_Union[WeightEntry, _Mapping]]] = ...) -> None: ...

class WeightEntry(_message.Message):
    __slots__ = ("resource", "source_tensor", "dtype", "shape", "transform")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_TENSOR_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    TRANSFORM_FIELD_NUMBER: _ClassVar[int]
    resource: str
    source_tensor: str
    dtype: _manifest_pb2.DType
    shape: _containers.RepeatedScalarFieldContainer[int]
    transform: str
    def __init__(self, resource: _Optional[str] = ..., source_tensor: _Optional[str] = ..., dtype: _Optional[_Union[_manifest_pb2.DType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., transform: _Optional[str] = ...) -> None: ...

class RebuildManifest(_message.Message):
    __slots__ = ("version", "recipe", "checkpoint_digest", "arguments")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RECIPE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_DIGEST_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    version: int
    recipe: str
    checkpoint_digest: str
    arguments: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, version: _Optional[int] = ..., recipe: _Optional[str] = ..., checkpoint_digest: _Optional[str] = ..., arguments: _Optional[_Iterable[str]] = ...) -> None: ...
