"""Kernel compilation at startup: the forked prefill workers (plumbing only: on a CPU Triton
interprets and compiles nothing; the GPU path is covered by test_native_model's GPU test)."""

from __future__ import annotations

import contextlib
import os
import sys

import pytest

from helios.production import kernel_compile
from helios.production.kernel_compile import Specialization, prefill_disk_cache

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the prefill forks workers on Linux only")


class Recorder:
    """Stands in for a JIT function: `preload` leaves a file naming the process that ran it."""

    def __init__(self, directory, fail: bool = False) -> None:
        self.directory, self.fail = directory, fail

    def preload(self, data: str) -> None:
        if self.fail:
            raise RuntimeError(f"cannot compile {data}")
        (self.directory / f"{data}.{os.getpid()}").write_text(data)


@pytest.fixture(autouse=True)
def no_driver(monkeypatch):
    monkeypatch.setattr(kernel_compile, "_pin_device", lambda device_index: None)  # no GPU driver here


def test_prefill_runs_every_specialization_in_forked_workers(tmp_path):
    recorder = Recorder(tmp_path)
    items = [Specialization(recorder, f"key{i}", f"spec{i}") for i in range(6)]
    assert prefill_disk_cache(items, 0, processes=3) == 0
    ran = sorted(path.name.split(".") for path in tmp_path.iterdir())
    assert [name for name, _ in ran] == sorted(f"spec{i}" for i in range(6))
    assert all(int(pid) != os.getpid() for _, pid in ran)  # none in this process
    assert kernel_compile._FORKED == []


def test_failures_are_counted_and_left_to_the_in_process_compile(tmp_path, caplog):
    items = [Specialization(Recorder(tmp_path), "good", "good"),
             Specialization(Recorder(tmp_path, fail=True), "bad", "bad")]
    assert prefill_disk_cache(items, 0, processes=2) == 1
    assert [path.name.split(".")[0] for path in tmp_path.iterdir()] == ["good"]
    assert "cannot compile bad" in caplog.text


def test_one_process_or_one_specialization_prefills_nothing(tmp_path):
    items = [Specialization(Recorder(tmp_path), f"key{i}", f"spec{i}") for i in range(3)]
    assert prefill_disk_cache(items, 0, processes=1) == 0
    assert prefill_disk_cache(items[:1], 0, processes=4) == 0
    assert list(tmp_path.iterdir()) == []


class Hangs:
    """Stands in for a JIT function whose compile never returns (a worker deadlocked after fork)."""

    def preload(self, data: str) -> None:
        import time

        time.sleep(60)


def test_workers_past_the_deadline_are_killed_and_everything_is_left_to_the_in_process_compile(
        tmp_path, monkeypatch, caplog):
    import time

    monkeypatch.setattr(kernel_compile, "PREFILL_TIMEOUT_S", 1.0)
    items = [Specialization(Recorder(tmp_path), "good", "good"), Specialization(Hangs(), "stuck", "stuck")]
    started = time.monotonic()
    assert prefill_disk_cache(items, 0, processes=2) == 2
    assert time.monotonic() - started < 30
    assert "did not finish in 1 s" in caplog.text
    assert kernel_compile._FORKED == []


def _body(x):
    return x


def test_compiled_kernels_counts_every_cache_entry_of_the_kernel_modules_once(monkeypatch):
    """`compiled_kernels()` sums the in-memory kernel caches of each JIT function defined by a module
    of helios.production.kernels, on every device, a function imported by two modules counted once."""
    import types

    from triton.runtime.jit import JITFunction

    base = kernel_compile.compiled_kernels()  # 0 on a CPU: the kernels are interpreted
    function = JITFunction(_body)  # a JIT function as a GPU process defines it; never launched here
    function.device_caches[0] = ({"a": object(), "b": object()}, {}, None, None, None)
    function.device_caches[1] = ({"c": object()}, {}, None, None, None)
    for name in ("helios.production.kernels._counted", "helios.production.kernels._importer"):
        monkeypatch.setitem(sys.modules, name, types.SimpleNamespace(kernel=function, other=42))
    outside = JITFunction(_body)  # a module outside helios.production.kernels: not Helios's kernels
    outside.device_caches[0] = ({"x": object()}, {}, None, None, None)
    monkeypatch.setitem(sys.modules, "elsewhere._not_counted", types.SimpleNamespace(kernel=outside))
    assert kernel_compile.compiled_kernels() == base + 3
    function.device_caches[1][0]["d"] = object()  # a launch that compiles adds an entry
    assert kernel_compile.compiled_kernels() == base + 4


def test_discovery_meets_every_specialization_as_a_fresh_process_would(monkeypatch):
    """Triton asks its cache hook only on an in-memory miss, so discovery in a process that already
    compiled some of a load's kernels (for another load) would leave them out of the load's record
    and a fresh process would compile them at a launch. Discovery hides every production kernel's
    in-memory cache while the plans run and gives it back afterwards, also when a run fails."""
    import types

    from triton.runtime.jit import JITFunction

    function = JITFunction(_body)
    held = {"compiled before": object()}
    function.device_caches[0] = (dict(held), {}, None, None, None)
    monkeypatch.setitem(sys.modules, "helios.production.kernels._hidden", types.SimpleNamespace(kernel=function))
    seen = []

    class Plan:
        def forms(self):
            return ("own",)

        def run(self, rank_form):
            seen.append(dict(function.device_caches[0][0]))

    assert kernel_compile.discover([Plan()]) == [] and seen == [{}]  # hidden while the plan ran
    assert function.device_caches[0][0] == held  # given back

    def fails():
        assert not function.device_caches[0][0]
        raise RuntimeError("a run failed")

    with pytest.raises(RuntimeError, match="a run failed"):
        kernel_compile.discover([], extra=[fails])
    assert function.device_caches[0][0] == held


class Keyed(Recorder):
    """A recorder with a JIT function's source hash (`cache_key`)."""

    def __init__(self, directory, cache_key: str) -> None:
        super().__init__(directory)
        self.cache_key = cache_key


def test_a_specialization_set_digests_alike_in_any_order_and_differs_in_any_part(tmp_path):
    a, b = Keyed(tmp_path, "src-a"), Keyed(tmp_path, "src-b")
    items = [Specialization(a, "k1", "d1"), Specialization(b, "k2", "d2")]
    digest = kernel_compile.specialization_digest
    assert digest(items, "triton 3.6 sm (9, 0)") == digest(items[::-1], "triton 3.6 sm (9, 0)")
    assert digest(items, "triton 3.6 sm (9, 0)") != digest(items, "triton 3.6 sm (8, 0)")  # another device
    assert digest(items, "p") != digest(items[:1], "p")  # one specialization fewer
    assert digest(items, "p") != digest([items[0], Specialization(b, "k3", "d2")], "p")  # another cache key
    assert digest(items, "p") != digest([items[0], Specialization(Keyed(tmp_path, "src-c"), "k2", "d2")], "p")


def test_a_recorded_set_skips_the_forked_prefill_and_an_unrecorded_one_runs_it(tmp_path):
    compiled = tmp_path / "compiled"
    compiled.mkdir()
    items = [Specialization(Recorder(compiled), f"key{i}", f"spec{i}") for i in range(4)]
    record = tmp_path / "cache" / kernel_compile.RECORDS_DIR / "digest"
    assert kernel_compile.prefill_unless_recorded(items, 0, 2, record) == 0  # not recorded: prefilled
    assert len(list(compiled.iterdir())) == 4
    kernel_compile.record_compiled(record)
    assert record.exists()
    for path in compiled.iterdir():
        path.unlink()
    assert kernel_compile.prefill_unless_recorded(items, 0, 2, record) is None  # recorded: no worker ran
    assert list(compiled.iterdir()) == []
    kernel_compile.record_compiled(None)  # no cache directory: nothing to record


def test_a_record_that_cannot_be_written_is_left_out(tmp_path, caplog):
    import logging

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with caplog.at_level(logging.INFO, logger=kernel_compile.__name__):
        kernel_compile.record_compiled(blocked / kernel_compile.RECORDS_DIR / "digest")
    assert "record not written" in caplog.text


def test_records_live_in_tritons_cache_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert kernel_compile.prefill_record("abc") == tmp_path / kernel_compile.RECORDS_DIR / "abc"
    assert kernel_compile.specializations_record("abc") == tmp_path / kernel_compile.SETS_DIR / "abc.json"
    assert kernel_compile.products_record("abc") == tmp_path / kernel_compile.PRODUCTS_DIR / "abc.json"
    assert kernel_compile.load_record("abc") == tmp_path / kernel_compile.LOADS_DIR / "abc.json"


def test_a_loads_memory_is_recorded_read_back_and_forgotten(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    record = kernel_compile.load_record("identity")
    assert kernel_compile.recorded_load_memory(record) is None  # nothing recorded yet
    memory = kernel_compile.LoadMemory(transient=123_456_789, kept=987_654_321)
    assert kernel_compile.save_load_record(record, memory)
    assert kernel_compile.recorded_load_memory(record) == memory
    zero = kernel_compile.LoadMemory(0, 0)
    assert kernel_compile.save_load_record(record, zero) and kernel_compile.recorded_load_memory(record) == zero
    kernel_compile.forget_record(record)
    assert kernel_compile.recorded_load_memory(record) is None
    assert not kernel_compile.save_load_record(None, memory)
    assert kernel_compile.recorded_load_memory(None) is None


@pytest.mark.parametrize("text", ["not json", "[]", "{}", '{"transient_bytes": 1}', '{"kept_bytes": 1}',
                                  '{"transient_bytes": -1, "kept_bytes": 1}', '{"transient_bytes": 1.5, "kept_bytes": 1}',
                                  '{"transient_bytes": 1, "kept_bytes": true}', '{"transient_bytes": "8", "kept_bytes": 1}'])
def test_a_load_record_that_cannot_be_read_is_not_used(tmp_path, text):
    record = tmp_path / "load.json"
    record.write_text(text)
    assert kernel_compile.recorded_load_memory(record) is None


def test_compile_recorded_compiles_nothing_without_a_record_and_nothing_on_a_cpu(tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert kernel_compile.compile_recorded("identity", torch.device("cpu")) == kernel_compile.CompiledPlans(0)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    # on a GPU device without a record: None (the load measures as a cold one), and nothing is discovered
    monkeypatch.setattr(kernel_compile, "discover", lambda *a: pytest.fail("discovered without plans"))
    assert kernel_compile.compile_recorded("identity", torch.device("cuda")) is None


# ------------------------------------------------------------------ a load's specializations, recorded


def _recorded_kernel(x):
    return x


def _plain_function(x):
    return x


def _as_jit_function():
    """A JIT function importable back by module and name, as a GPU process defines one (under
    Triton's interpreter `triton.jit` makes an interpreted function instead)."""
    from triton.runtime.jit import JITFunction

    global _recorded_kernel
    if not isinstance(_recorded_kernel, JITFunction):
        _recorded_kernel = JITFunction(_recorded_kernel)
    return _recorded_kernel


def test_a_loads_specializations_are_recorded_and_read_back_with_their_functions(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    record = kernel_compile.specializations_record("identity")
    assert record == tmp_path / kernel_compile.SETS_DIR / "identity.json"
    assert kernel_compile.recorded_specializations(record) is None  # nothing recorded yet
    items = [Specialization(_as_jit_function(), f"key{i}", f'{{"spec": {i}}}') for i in range(3)]
    assert kernel_compile.save_specializations(record, items)
    assert kernel_compile.recorded_specializations(record) == items  # the same functions, keys and data, in order
    assert [p.name for p in record.parent.iterdir()] == ["identity.json"]  # written whole: no partial file left
    kernel_compile.forget_record(record)
    assert kernel_compile.recorded_specializations(record) is None
    kernel_compile.forget_record(record)  # forgetting twice is no error
    assert not kernel_compile.save_specializations(None, items)  # no cache directory: nothing recorded


def test_a_function_defined_inside_a_function_is_not_recorded(tmp_path):
    from triton.runtime.jit import JITFunction

    def nested(x):
        return x

    record = tmp_path / "record.json"
    items = [Specialization(_as_jit_function(), "a", "a"), Specialization(JITFunction(nested), "b", "b")]
    assert not kernel_compile.save_specializations(record, items)
    assert not record.exists()


@pytest.mark.parametrize("entry", [
    None,  # not JSON
    {"name": "_no_such_kernel"},
    {"name": "_plain_function"},  # not a JIT function
    {"module": "helios.no_such_module"},
    {"key": ""},  # a specialization without its key
    {"data": None},  # a field missing
])
def test_a_record_that_cannot_be_read_back_is_not_used(tmp_path, caplog, entry):
    import json
    import logging

    _as_jit_function()
    record = tmp_path / "record.json"
    good = {"module": __name__, "name": "_recorded_kernel", "key": "k", "data": "d"}
    if entry is None:
        record.write_text("not json")
    else:
        written = {**good, **entry}
        record.write_text(json.dumps([good, {k: v for k, v in written.items() if v is not None}]))
    with caplog.at_level(logging.INFO, logger=kernel_compile.__name__):
        assert kernel_compile.recorded_specializations(record) is None
    assert "not used" in caplog.text
    record.write_text(json.dumps([good]))
    assert kernel_compile.recorded_specializations(record) == [Specialization(_as_jit_function(), "k", "d")]


def test_helios_source_digest_is_stable_within_a_process():
    digest = kernel_compile.source_digest()
    assert len(digest) == 64 and digest == kernel_compile.source_digest()


def test_compile_plans_does_nothing_on_a_cpu():
    import torch

    assert kernel_compile.compile_plans([], torch.device("cpu"), identity="x") == kernel_compile.CompiledPlans(0)


def test_a_record_that_cannot_be_written_returns_false_and_leaves_nothing(tmp_path, caplog):
    import logging

    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    with caplog.at_level(logging.INFO, logger=kernel_compile.__name__):
        assert not kernel_compile.write_record(blocked / "records" / "x.json", [1, 2])
    assert "x.json not recorded" in caplog.text
    assert kernel_compile.write_record(tmp_path / "records" / "x.json", [1, 2])
    assert (tmp_path / "records" / "x.json").read_text() == "[1, 2]"
    assert [p.name for p in (tmp_path / "records").iterdir()] == ["x.json"]
