"""The binary form accepts what the JSON form accepts: unknown field numbers, at any depth, are rejected
with their path (JSON rejects unknown names when it is parsed)."""

from __future__ import annotations

import pytest

from helios.contract import PreparedContract
from helios.contract import errors as e
from helios.proto import contract_pb2, manifest_pb2
from tests.contract import valid

UNKNOWN_99 = bytes([0x98, 0x06, 0x01])  # field 99, varint 1


def _nested(field_number: int, payload: bytes) -> bytes:
    """A length-delimited occurrence of message field `field_number`; parsing merges it into that field."""
    return bytes([(field_number << 3) | 2, len(payload)]) + payload


def _with(extra: bytes) -> contract_pb2.ServingContract:
    return contract_pb2.ServingContract.FromString(valid.serving().SerializeToString() + extra)


@pytest.mark.parametrize(("extra", "path"), [
    (UNKNOWN_99, "(root)"),
    (_nested(11, UNKNOWN_99), "model"),  # ServingContract.model
    (_nested(11, _nested(2, UNKNOWN_99)), "model.vocabulary"),  # ModelContract.vocabulary
    (_nested(10, _nested(1, UNKNOWN_99)), "defaults.sampling"),
    (_nested(10, bytes([0x38, 0x01])), "defaults"),  # ServingDefaults field 7: reserved, removed
])
def test_unknown_fields_in_the_binary_contract_are_rejected_with_their_path(extra, path):
    serving = _with(extra)
    with pytest.raises(e.UnknownWireField) as raised:
        PreparedContract.decode(serving, valid.manifest())
    assert raised.value.path == path
    assert any(type(p) is e.UnknownWireField and p.path == path
               for p in PreparedContract.check(serving, valid.manifest()))


def test_unknown_fields_in_a_repeated_graph_and_in_the_manifest_are_rejected():
    serving = valid.serving()
    graph = contract_pb2.GraphContract.FromString(serving.model.graphs[2].SerializeToString() + UNKNOWN_99)
    serving.model.graphs[2].CopyFrom(graph)
    with pytest.raises(e.UnknownWireField) as raised:
        PreparedContract.decode(serving, valid.manifest())
    assert raised.value.path == "model.graphs[2]"
    manifest = manifest_pb2.ExecutionManifest.FromString(
        valid.manifest().SerializeToString() + _nested(5, UNKNOWN_99))  # ExecutionManifest.transport
    problems = PreparedContract.check(valid.serving(), manifest)
    assert [p.path for p in problems if type(p) is e.UnknownWireField] == ["manifest.transport"]


def test_a_valid_binary_contract_has_no_unknown_fields():
    PreparedContract.decode(valid.serving(), valid.manifest())
