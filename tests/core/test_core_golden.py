"""Golden cores: the byte layout of a tiny core of each format is pinned, forever.

The files in golden/ were written once by `golden_core` below. Engine upgrades must keep reading
them (the specification: no re-export for previously supported cores), and the writer must keep
producing them byte for byte. NOTE: a zstd upgrade may change the compressed bytes of the writer's
output; the reading tests must keep passing regardless.
"""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path

import pytest

from helios.core import ResourceInput, open_core, write_core
from helios.core.layout import HEADER_NBYTES, MAGIC
from helios.proto import core_pb2
from tests.core.forge import PROTECTION_KEY, PUBLISHER, SIGNING_KEY

GOLDEN = Path(__file__).parent / "golden"
RESOURCES = (
    ResourceInput("program/decode", core_pb2.RESOURCE_KIND_PROGRAM, b"\x08\x01\x12\x04main"),
    ResourceInput("weights/embed", core_pb2.RESOURCE_KIND_WEIGHT, bytes(range(64)) * 2),
    ResourceInput("chat_template", core_pb2.RESOURCE_KIND_CHAT_TEMPLATE, b"{{ messages }}"),
)
FORMATS = {"payload": "tiny-payload.hcore", "index-v6": "tiny-index-v6.hcore", "index-v4": "tiny-index-v4.hcore"}
SHA256 = {
    "payload": "cc1663337da02301400507f0fa5a90e70e0f057dc1d995abeca4b0703a875b42",
    "index-v6": "63f7995afddae468ad033ecbe897e8d041685d59048a0ea81a05acf0cdc7980f",
    "index-v4": "980523626141e18029e52e56e3edbde1aa4856ee563c69e2d4f9e62ea7253ddf",
}


def golden_core(path: Path, format: str) -> None:
    deployment = core_pb2.DeploymentBody()
    deployment.contract.served_id = "golden"
    deployment.contract.context_tokens = 256
    deployment.manifest.abi_label = "golden-abi"
    deployment.manifest.ranks = 1
    write_core(path, publisher=PUBLISHER, signing_key=SIGNING_KEY, deployment=deployment, resources=RESOURCES,
               format=format, protection_key=PROTECTION_KEY if format == "index-v4" else None,
               encrypted_chunk_nbytes=48)


@pytest.mark.parametrize("format", FORMATS)
def test_writer_reproduces_golden_bytes(tmp_path, format):
    golden_core(tmp_path / "c.hcore", format)
    data = (tmp_path / "c.hcore").read_bytes()
    assert data == (GOLDEN / FORMATS[format]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHA256[format]


@pytest.mark.parametrize("format", FORMATS)
def test_golden_cores_still_read(format):
    with open_core(GOLDEN / FORMATS[format], trusted_keys=SIGNING_KEY.public_key(), accept=PUBLISHER,
                   protection_key=PROTECTION_KEY) as core:
        assert core.format == format
        assert core.contract.served_id == "golden" and core.manifest.abi_label == "golden-abi"
        assert [(rid, r.kind) for rid, r in core.resources.items()] == [(r.id, r.kind) for r in RESOURCES]
        assert [core.read(r.id) for r in RESOURCES] == [r.data for r in RESOURCES]


def test_golden_payload_layout():
    data = (GOLDEN / FORMATS["payload"]).read_bytes()
    assert data[:8] == MAGIC == b"\x89HCORE\r\n"
    body_offset, body_nbytes = struct.unpack_from("<QQ", data, 8)
    assert body_offset + body_nbytes == len(data)
    body = core_pb2.CoreBody.FromString(data[body_offset:])
    assert body.format_version == 2 and not body.signed_index
    assert len(body.signature) == 64 and len(body.public_key) == 32
    envelope = core_pb2.PayloadEnvelope.FromString(body.signed_envelope)
    assert envelope.publisher_namespace == PUBLISHER
    cursor = HEADER_NBYTES
    for resource, location in zip(envelope.resources, body.locations.locations, strict=True):
        assert (location.resource_id, location.file, location.offset) == (resource.id, "", cursor)
        assert location.nbytes == resource.stored_nbytes and resource.chunk_nbytes == 4 << 20
        stored = data[cursor : cursor + resource.stored_nbytes]
        assert stored[:4] == b"\x28\xb5\x2f\xfd"  # the zstd frame magic
        assert resource.chunk_sha256 == [hashlib.sha256(stored).digest()]
        cursor += resource.stored_nbytes
    assert cursor == body_offset
