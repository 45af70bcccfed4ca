"""Unknown wire fields in the binary contract and manifest (host side).

The JSON form rejects unknown fields when it is parsed (jsonform.py); the binary form keeps them as
unknown fields, which would otherwise be dropped silently (and lost again on any re-encoding).
`unknown_fields(serving, manifest)` yields one UnknownWireField per message that carries field
numbers this schema does not have, at every depth, named by its field path, so the binary and JSON
forms accept the same contracts. A removed field is reserved and stays unknown: a core carrying one is
rejected rather than having a meaning silently ignored.
"""

from __future__ import annotations

from collections.abc import Iterator

from google.protobuf.message import Message
from google.protobuf.unknown_fields import UnknownFieldSet

from helios.contract.errors import UnknownWireField
from helios.proto import contract_pb2, manifest_pb2


def _walk(message: Message, path: str) -> Iterator[UnknownWireField]:
    unknown = UnknownFieldSet(message)
    if len(unknown):
        numbers = sorted({field.field_number for field in unknown})
        yield UnknownWireField(path or "(root)", f"{message.DESCRIPTOR.name} carries unknown field number(s) "
                               f"{', '.join(map(str, numbers))}")
    for descriptor, value in message.ListFields():
        if descriptor.message_type is None:
            continue
        child = f"{path}.{descriptor.name}" if path else descriptor.name
        if descriptor.is_repeated:
            for i, item in enumerate(value):
                yield from _walk(item, f"{child}[{i}]")
        else:
            yield from _walk(value, child)


def unknown_fields(serving: contract_pb2.ServingContract,
                   manifest: manifest_pb2.ExecutionManifest) -> Iterator[UnknownWireField]:
    """Every message of the contract or manifest that carries unknown field numbers."""
    yield from _walk(serving, "")
    yield from _walk(manifest, "manifest")
