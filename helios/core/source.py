"""CoreSource (host side): what a reader of a core's content needs, whoever holds the bytes.

An opened core (`open_core` returns a `Core`: verified, authorized, read lazily), a prepared core
before sealing (`helios.ignition.prepare.PreparedCore`: unsigned, in memory) and the forges of tests
all offer it: the serving contract and the execution manifest as wire messages, the resources they
hold, and one resource's decoded bytes by id. A reader that needs more of an opened core (its
publisher, format, signature, or reads into caller buffers) takes `Core` itself.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Protocol, runtime_checkable

from helios.proto import contract_pb2, manifest_pb2


class ResourceEntry(Protocol):
    """One resource a source holds: a `core_pb2.ExecutableResource`, or a prepared resource."""

    @property
    def id(self) -> str: ...

    @property
    def kind(self) -> int: ...  # core_pb2.ResourceKind


@runtime_checkable
class CoreSource(Protocol):
    """A core's content: the contract and manifest it declares, and its resources' decoded bytes."""

    @property
    def contract(self) -> contract_pb2.ServingContract: ...

    @property
    def manifest(self) -> manifest_pb2.ExecutionManifest: ...

    @property
    def resources(self) -> Mapping[str, ResourceEntry] | Collection[ResourceEntry]:
        """An opened core maps id -> entry; a prepared core lists its entries in preparation order."""
        ...

    def read(self, resource_id: str) -> bytes:
        """The decoded bytes of resource `resource_id` (an opened core verifies them first)."""
        ...
