"""Round trips of every core format: what is written is read back, in order, byte for byte."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helios.core import (
    BufferSizeMismatch,
    LayoutGap,
    ResourceInput,
    ResourceNotFound,
    SiblingFileInvalid,
    open_core,
    relocate_core,
    write_core,
)
from helios.proto import core_pb2
from tests.core.forge import (
    OPAQUE,
    PROTECTION_KEY,
    PUBLISHER,
    SIGNING_KEY,
    WEIGHT,
    random_bytes,
    rewrite_body,
)

FORMATS = ("payload", "index-v6", "index-v4")


def deployment() -> core_pb2.DeploymentBody:
    body = core_pb2.DeploymentBody()
    body.contract.served_id = "tiny"
    body.contract.aliases.append("tiny-alias")
    body.manifest.ranks = 1
    return body


def write(path, resources, format="payload", **extra):
    write_core(path, publisher=PUBLISHER, signing_key=SIGNING_KEY, deployment=deployment(),
               resources=resources, format=format, protection_key=PROTECTION_KEY if format == "index-v4" else None,
               **extra)
    return path


def open_(path, trust, **extra):
    return open_core(path, trusted_keys=trust, accept=PUBLISHER, protection_key=PROTECTION_KEY, **extra)


@pytest.mark.parametrize("format", FORMATS)
def test_round_trip_keeps_order_bytes_contract_and_manifest(tmp_path, trust, format):
    resources = [
        ResourceInput("z-last-name-first", WEIGHT, random_bytes(5000, 1)),
        ResourceInput("empty", OPAQUE, b""),
        ResourceInput("zeros", WEIGHT, bytes(3 << 20)),
        ResourceInput("a", core_pb2.RESOURCE_KIND_TOKENIZER, b'{"x": 1}'),
    ]
    path = write(tmp_path / "c.hcore", iter(resources), format, encrypted_chunk_nbytes=1 << 20)
    with open_(path, trust) as core:
        assert core.format == format
        assert core.publisher == PUBLISHER
        assert core.contract.served_id == "tiny" and list(core.contract.aliases) == ["tiny-alias"]
        assert core.manifest.ranks == 1
        assert list(core.resources) == [r.id for r in resources]
        for resource in resources:
            assert core.resources[resource.id].kind == resource.kind
            assert core.resources[resource.id].decoded_nbytes == len(resource.data)
            assert core.read(resource.id) == resource.data
        core.verify_all()


@pytest.mark.parametrize("format", FORMATS)
def test_identical_inputs_give_identical_files(tmp_path, format):
    resources = [ResourceInput("w", WEIGHT, random_bytes(70_000, 2)), ResourceInput("e", OPAQUE, b"")]
    first = write(tmp_path / "a.hcore", resources, format).read_bytes()
    second = write(tmp_path / "b.hcore", iter(resources), format).read_bytes()
    assert first == second


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    items=st.lists(
        st.tuples(st.text(min_size=1, max_size=12), st.sampled_from([1, 2, 3, 4, 7]), st.binary(max_size=600)),
        max_size=6, unique_by=lambda item: item[0],
    ),
    format=st.sampled_from(FORMATS),
)
def test_round_trip_property(tmp_path, trust, items, format):
    resources = [ResourceInput(rid, kind, data) for rid, kind, data in items]
    path = write(tmp_path / "p.hcore", resources, format, encrypted_chunk_nbytes=64)
    with open_(path, trust) as core:
        assert [(rid, r.kind) for rid, r in core.resources.items()] == [(r.id, r.kind) for r in resources]
        assert [core.read(r.id) for r in resources] == [r.data for r in resources]


@pytest.mark.parametrize("workers", [0, 1, 2])
def test_multi_chunk_resource_into_caller_buffer(tmp_path, trust, workers):
    data = random_bytes(9 << 20, 3)  # incompressible: three 4 MiB chunks of stored bytes
    path = write(tmp_path / "big.hcore", [ResourceInput("w", WEIGHT, data)])
    with open_(path, trust, workers=workers) as core:
        assert len(core.resources["w"].chunk_sha256) == 3
        out = np.zeros(len(data) // 4, dtype=np.float32)  # any writable buffer of the decoded length
        core.read_into("w", memoryview(out))
        assert out.tobytes() == data


def test_read_into_rejects_wrong_buffers_and_unknown_ids(tmp_path, trust):
    path = write(tmp_path / "c.hcore", [ResourceInput("w", WEIGHT, b"abcdef")])
    with open_(path, trust) as core:
        with pytest.raises(BufferSizeMismatch, match="'w'.*5 bytes.*6"):
            core.read_into("w", bytearray(5))
        with pytest.raises(BufferSizeMismatch, match="read-only"):
            core.read_into("w", b"123456")
        with pytest.raises(ResourceNotFound, match="'nope'"):
            core.read("nope")
    with pytest.raises(ValueError, match="closed"):
        core.read("w")


def test_relocation_to_sibling_files_needs_no_resigning(tmp_path, trust):
    a, b, c = random_bytes(1000, 4), random_bytes(2000, 5), random_bytes(3000, 6)
    resources = [ResourceInput("a", WEIGHT, a), ResourceInput("b", WEIGHT, b), ResourceInput("c", WEIGHT, c)]
    path = write(tmp_path / "c.hcore", resources)
    original = path.read_bytes()
    relocate_core(path, {"a": "rank0.bin", "c": "rank0.bin"})
    with open_(path, trust) as core:
        assert [core.placement(rid).file for rid in "abc"] == ["rank0.bin", "", "rank0.bin"]
        assert (tmp_path / "rank0.bin").stat().st_size == sum(core.resources[rid].stored_nbytes for rid in "ac")
        assert [core.read(rid) for rid in "abc"] == [a, b, c]
    relocate_core(path, {"a": "", "c": ""})
    assert path.read_bytes() == original  # the LocationSet is canonical: back home, the same bytes


def test_sibling_file_with_unreferenced_bytes_is_rejected(tmp_path, trust):
    path = write(tmp_path / "c.hcore", [ResourceInput("a", WEIGHT, b"x" * 100), ResourceInput("b", WEIGHT, b"y")])
    relocate_core(path, {"a": "weights.bin"})
    with open(tmp_path / "weights.bin", "ab") as sibling:
        sibling.write(b"polyglot")
    with pytest.raises(LayoutGap, match="sibling 'weights.bin'"):
        open_(path, trust)


def test_missing_or_unsafe_sibling_files_are_rejected(tmp_path, trust):
    from helios.core import LocationInvalid

    path = write(tmp_path / "c.hcore", [ResourceInput("a", WEIGHT, b"x" * 100), ResourceInput("b", WEIGHT, b"y")])
    with pytest.raises(SiblingFileInvalid, match="not a plain file name"):
        relocate_core(path, {"a": "../weights.bin"})
    with pytest.raises(LocationInvalid, match="no resource 'z'"):
        relocate_core(path, {"z": "weights.bin"})
    assert not list(tmp_path.glob("*.partial"))
    relocate_core(path, {"a": "weights.bin"})
    os.unlink(tmp_path / "weights.bin")
    with pytest.raises(SiblingFileInvalid, match="'weights.bin' cannot be opened"):
        open_(path, trust)

    def escape(body):
        body.locations.locations[0].file = "../weights.bin"

    rewrite_body(path, escape)
    with pytest.raises(SiblingFileInvalid, match="not a plain file name"):
        open_(path, trust)


@pytest.mark.parametrize("workers", [0, 2])
def test_large_resources_are_read_again_and_hashed_again(tmp_path, trust, monkeypatch, workers):
    import helios.core.reader as reader_module

    monkeypatch.setattr(reader_module, "_KEEP_VERIFIED_NBYTES", 0)  # every resource takes the streaming path
    data = random_bytes(9 << 20, 7)
    path = write(tmp_path / "big.hcore", [ResourceInput("w", WEIGHT, data), ResourceInput("e", OPAQUE, b"")])
    with open_(path, trust, workers=workers) as core:
        assert core.read("w") == data and core.read("e") == b""


def test_bytes_changed_between_the_passes_are_never_used(tmp_path, trust, monkeypatch):
    import helios.core.reader as reader_module
    from helios.core import ChunkDigestMismatch
    from helios.core.chunks import CHUNK_NBYTES, StoredBytes
    from tests.core.forge import flip

    monkeypatch.setattr(reader_module, "_KEEP_VERIFIED_NBYTES", 0)
    data = random_bytes(9 << 20, 8)
    path = write(tmp_path / "big.hcore", [ResourceInput("w", WEIGHT, data)])
    original = StoredBytes.verify_all

    def verify_then_alter(self, executor, keep=False):
        result = original(self, executor, keep)
        flip(path, self.offset + CHUNK_NBYTES + 5)  # another writer changes chunk 1 after the first pass
        return result

    monkeypatch.setattr(StoredBytes, "verify_all", verify_then_alter)
    with open_(path, trust) as core:
        out = bytearray(len(data))
        with pytest.raises(ChunkDigestMismatch, match="chunk 1 of 3.*changed after it was verified"):
            core.read_into("w", out)
    assert out == bytes(len(out))


@pytest.mark.parametrize(("workers", "keep"), [(0, 64 << 20), (1, 64 << 20), (2, 64 << 20), (1, 0), (2, 0)])
def test_read_many_into_pipelines_and_matches_read(tmp_path, trust, monkeypatch, workers, keep):
    import helios.core.reader as reader_module

    monkeypatch.setattr(reader_module, "_KEEP_VERIFIED_NBYTES", keep)  # 0: the streaming path, no deadlock
    datas = [random_bytes(n, n) for n in (5 << 20, 0, 100, 9 << 20)]
    resources = [ResourceInput(f"r{i}", WEIGHT, data) for i, data in enumerate(datas)]
    path = write(tmp_path / "many.hcore", resources)
    with open_(path, trust, workers=workers) as core:
        outs = [bytearray(len(data)) for data in datas]
        core.read_many_into(zip(core.resources, outs, strict=True))
        assert outs == datas


def test_read_many_into_zeroes_the_failing_buffer(tmp_path, trust):
    from helios.core import ChunkDigestMismatch
    from tests.core.forge import flip

    datas = [random_bytes(1000, 1), random_bytes(2000, 2), random_bytes(3000, 3)]
    path = write(tmp_path / "many.hcore", [ResourceInput(f"r{i}", WEIGHT, d) for i, d in enumerate(datas)])
    with open_(path, trust) as core:
        offset = core.placement("r1").offset
    flip(path, offset + 7)
    with open_(path, trust, workers=2) as core:
        outs = [bytearray(b"\xaa" * len(d)) for d in datas]
        with pytest.raises(ChunkDigestMismatch, match="'r1'"):
            core.read_many_into(zip(core.resources, outs, strict=True))
    assert outs[0] == datas[0] and outs[1] == bytes(len(datas[1]))


def test_resource_input_accepts_buffers_and_refuses_the_rest(tmp_path, trust):
    from helios.core import EnvelopeInvalid

    array = np.arange(1000, dtype=np.float32)
    resources = [ResourceInput("array", WEIGHT, memoryview(array)), ResourceInput("ba", OPAQUE, bytearray(b"xyz"))]
    path = write(tmp_path / "c.hcore", resources)
    with open_(path, trust) as core:
        assert core.read("array") == array.tobytes() and core.read("ba") == b"xyz"
    with pytest.raises(EnvelopeInvalid, match="C-contiguous"):
        ResourceInput("strided", WEIGHT, memoryview(array)[::2])
    with pytest.raises(EnvelopeInvalid, match="not str"):
        ResourceInput("text", WEIGHT, "text")
    with pytest.raises(EnvelopeInvalid, match="kind 0"):
        ResourceInput("k", 0, b"")
    with pytest.raises(EnvelopeInvalid, match="non-empty"):
        ResourceInput("", WEIGHT, b"")
    with pytest.raises(EnvelopeInvalid, match="given twice"):
        write(tmp_path / "d.hcore", [ResourceInput("a", WEIGHT, b""), ResourceInput("a", WEIGHT, b"")])
    assert not (tmp_path / "d.hcore").exists() and not (tmp_path / "d.hcore.partial").exists()


def test_writer_holds_one_resource_at_a_time(tmp_path):
    import tracemalloc

    resource_nbytes = 4 << 20

    def resources():
        for index in range(6):  # 24 MiB in all, made one at a time
            yield ResourceInput(f"r{index}", WEIGHT, random_bytes(resource_nbytes, index))

    tracemalloc.start()
    try:
        write(tmp_path / "c.hcore", resources())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # one resource's input and its stored frame, with room for the generator's scratch
    assert peak < 3.5 * resource_nbytes, peak


@pytest.mark.parametrize("format", FORMATS)
def test_a_core_without_resources(tmp_path, trust, format):
    path = write(tmp_path / "empty.hcore", [], format)
    with open_(path, trust) as core:
        assert dict(core.resources) == {} and core.contract.served_id == "tiny"
        core.verify_all()
