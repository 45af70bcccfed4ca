"""Reading many resources at once (`Core.read_each_into`, `read_many_into`): the same bytes as one
resource at a time, the same errors, buffers handed out lazily, nothing unverified ever yielded."""

from __future__ import annotations

import threading

import pytest

import helios.core.reader as reader_module
from helios.core import (
    ChunkDigestMismatch,
    DecodedLengthMismatch,
    ResourceInput,
    ResourceNotFound,
    TruncatedFrame,
    write_core,
)
from helios.core.chunks import CHUNK_NBYTES
from helios.core.frame import encode_resource
from helios.proto import core_pb2
from tests.core.forge import PROTECTION_KEY, PUBLISHER, SIGNING_KEY, WEIGHT, flip, forge, random_bytes
from tests.core.test_core_roundtrip import open_

FORMATS = ("payload", "index-v6", "index-v4")
SIZES = (5 << 20, 0, 100, 9 << 20, 70_000, 1, 3 << 20)  # multi-chunk, empty, tiny, odd


@pytest.fixture(autouse=True)
def parallel_even_when_small(monkeypatch):
    """Every test here takes the multi-threaded path, however small its core."""
    monkeypatch.setattr(reader_module, "_PARALLEL_MIN_NBYTES", 0)


def many_core(path, format="payload", datas=None):
    datas = datas if datas is not None else [random_bytes(n, i) for i, n in enumerate(SIZES)]
    write_core(path, publisher=PUBLISHER, signing_key=SIGNING_KEY, deployment=core_pb2.DeploymentBody(),
               resources=[ResourceInput(f"r{i}", WEIGHT, d) for i, d in enumerate(datas)], format=format,
               protection_key=PROTECTION_KEY if format == "index-v4" else None)
    return path, datas


@pytest.mark.parametrize("format", FORMATS)
@pytest.mark.parametrize("keep", [64 << 20, 0])  # 0: every resource is read and hashed again as it decodes
def test_parallel_reads_give_the_bytes_of_sequential_reads(tmp_path, trust, monkeypatch, format, keep):
    monkeypatch.setattr(reader_module, "_KEEP_VERIFIED_NBYTES", keep)
    path, datas = many_core(tmp_path / "many.hcore", format)
    with open_(path, trust, workers=0) as core:
        sequential = {resource_id: core.read(resource_id) for resource_id in core.resources}
    assert list(sequential.values()) == datas
    with open_(path, trust, workers=2, decoders=3) as core:
        buffers = {resource_id: bytearray(b"\xaa" * r.decoded_nbytes) for resource_id, r in core.resources.items()}
        seen = {}
        for resource_id, view in core.read_each_into(list(core.resources), buffers.__getitem__):
            seen[resource_id] = bytes(view)  # complete and verified when yielded
        assert seen == sequential and {k: bytes(v) for k, v in buffers.items()} == sequential


def test_read_many_into_runs_the_parallel_path(tmp_path, trust):
    path, datas = many_core(tmp_path / "many.hcore")
    with open_(path, trust, decoders=4) as core:
        outs = [bytearray(len(d)) for d in datas]
        core.read_many_into(zip(core.resources, outs, strict=True))
    assert outs == datas


def test_buffers_are_handed_out_lazily_and_in_flight_stays_bounded(tmp_path, trust):
    path, datas = many_core(tmp_path / "many.hcore")
    handed, outstanding, peak, threads = [], 0, 0, set()
    original = reader_module.Core.read_into

    def read_into(self, resource_id, out):
        threads.add(threading.get_ident())
        return original(self, resource_id, out)

    def destination(resource_id):
        nonlocal outstanding, peak
        handed.append(resource_id)
        outstanding += 1
        peak = max(peak, outstanding)
        return bytearray(len(datas[int(resource_id[1:])]))

    with open_(path, trust, decoders=2) as core, pytest.MonkeyPatch.context() as patch:
        patch.setattr(reader_module.Core, "read_into", read_into)
        ids = list(core.resources)
        for _ in core.read_each_into(ids, destination):
            outstanding -= 1
    assert handed == ids  # called once per id, in order
    assert peak <= 2  # never more buffers live than resources in flight
    assert threading.get_ident() not in threads  # decoded on the decoding threads


def test_one_thread_path_reads_on_the_callers_thread(tmp_path, trust, monkeypatch):
    monkeypatch.setattr(reader_module, "_PARALLEL_MIN_NBYTES", 1 << 40)  # a tiny core, as it were
    path, datas = many_core(tmp_path / "many.hcore")
    created = []
    original = reader_module.ThreadPoolExecutor

    def spy(*args, **kwargs):
        created.append(kwargs.get("thread_name_prefix"))
        return original(*args, **kwargs)

    monkeypatch.setattr(reader_module, "ThreadPoolExecutor", spy)
    with open_(path, trust, workers=1) as core:
        got = [bytes(view) for _, view in core.read_each_into(list(core.resources), lambda r: bytearray(
            core.resources[r].decoded_nbytes))]
    assert got == datas and "helios-decode" not in created


@pytest.mark.parametrize("keep", [64 << 20, 0])
def test_a_tampered_chunk_fails_the_read_and_is_never_yielded(tmp_path, trust, monkeypatch, keep):
    monkeypatch.setattr(reader_module, "_KEEP_VERIFIED_NBYTES", keep)
    path, datas = many_core(tmp_path / "many.hcore")
    with open_(path, trust) as core:
        offset = core.placement("r3").offset
    flip(path, offset + CHUNK_NBYTES + 11)  # chunk 1 of the 9 MiB resource
    buffers = [bytearray(b"\xaa" * len(d)) for d in datas]
    yielded = {}
    with open_(path, trust, decoders=3) as core:
        with pytest.raises(ChunkDigestMismatch, match="'r3'.*chunk 1 of 3"):
            for resource_id, view in core.read_each_into(list(core.resources), lambda r: buffers[int(r[1:])]):
                yielded[resource_id] = bytes(view)
    assert "r3" not in yielded and buffers[3] == bytes(len(datas[3]))
    for resource_id, data in yielded.items():
        assert data == datas[int(resource_id[1:])]
    for index, buffer in enumerate(buffers):  # every buffer: verified bytes, zeros, or untouched
        assert buffer in (datas[index], bytes(len(buffer)), b"\xaa" * len(buffer))


FRAME = encode_resource(random_bytes(50_000, 5))


@pytest.mark.parametrize(
    ("stored", "decoded", "error", "match"),
    [
        (FRAME[: len(FRAME) // 2], 50_000, TruncatedFrame, "needs|before its last block"),
        (FRAME, 50_001, DecodedLengthMismatch, "declares 50000 decoded bytes, the signed decoded length is 50001"),
    ],
    ids=["truncated-frame", "wrong-decoded-length"],
)
def test_signed_frame_violations_fail_a_parallel_read(tmp_path, trust, stored, decoded, error, match):
    good = encode_resource(random_bytes(60_000, 9))
    path = forge(tmp_path / "c.hcore", [("a", good, 60_000), ("w", stored, decoded), ("b", good, 60_000)])
    buffers = {"a": bytearray(60_000), "w": bytearray(b"\xaa" * decoded), "b": bytearray(60_000)}
    with open_(path, trust, decoders=3) as core:
        with pytest.raises(error, match=match):
            for _ in core.read_each_into(["a", "w", "b"], buffers.__getitem__):
                pass
    assert buffers["w"] == bytes(decoded)


def test_the_first_failing_id_in_order_is_raised(tmp_path, trust):
    path, datas = many_core(tmp_path / "many.hcore")
    with open_(path, trust) as core:
        first, second = core.placement("r0").offset, core.placement("r3").offset
    flip(path, second + 3)
    flip(path, first + 3)
    with open_(path, trust, decoders=8) as core, pytest.raises(ChunkDigestMismatch, match="'r0'"):
        core.read_many_into([(f"r{i}", bytearray(len(d))) for i, d in enumerate(datas)])


def test_unknown_ids_fail_before_any_buffer_is_asked_for(tmp_path, trust):
    path, _ = many_core(tmp_path / "many.hcore")
    asked = []
    with open_(path, trust) as core, pytest.raises(ResourceNotFound, match="'nope'"):
        list(core.read_each_into(["r0", "nope"], asked.append))
    assert asked == []


def test_a_consumer_that_stops_early_leaves_no_thread_running(tmp_path, trust):
    path, datas = many_core(tmp_path / "many.hcore")
    before = {t.ident for t in threading.enumerate()}
    with open_(path, trust, decoders=3) as core:
        reading = core.read_each_into(list(core.resources), lambda r: bytearray(len(datas[int(r[1:])])))
        next(reading)
        reading.close()
        assert not [t for t in threading.enumerate() if t.ident not in before and t.name.startswith("helios-decode")]
