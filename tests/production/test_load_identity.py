"""A load's identity: the key of its recorded kernel specializations (helios/production/kernel_compile.py).

Equal loads digest alike; anything that decides which Triton specializations the plans launch (a
program, a graph's lane rows, the product path, the decisions the policy gives untimed, the
platform) digests differently; a policy that cannot tell its untimed answers gives no identity.
"""

from __future__ import annotations

import dataclasses

import pytest

from helios.contract import PreparedContract, StartupOptions
from helios.production import native_model
from helios.production.lowering import product_choice
from helios.production.lowering.product_choice import (
    Decision,
    FixedPolicy,
    LinearPolicy,
    MeasuredPolicy,
    ProductShape,
)
from helios.production.native_model import LoadOptions

PLATFORM = "triton 3.6 torch 2.11 NVIDIA H100 sm (9, 0)"
SHAPE = ProductShape(1, (64,), 32, "bfloat16xbfloat16->bfloat16", "matmul")


@pytest.fixture(scope="module")
def loaded(cores):
    core = cores("llama")
    selection = PreparedContract.decode(core.contract, core.manifest).select(StartupOptions())
    options = LoadOptions(device="cpu")
    programs = native_model._programs(core, core.manifest, core.contract,
                                      {g.name: g.lane_rows for g in selection.graphs}, options)
    return core, programs, options


def identity(loaded, *, programs=None, options=None, policy=None, platform=PLATFORM):
    core, default_programs, default_options = loaded
    return native_model._load_identity(core.contract, core.manifest, programs or default_programs,
                                       options or default_options, policy or FixedPolicy("triton"), platform)


def test_equal_loads_digest_alike(loaded):
    assert identity(loaded) == identity(loaded)
    assert len(identity(loaded)) == 64


def test_what_decides_the_specializations_changes_the_identity(loaded):
    _, programs, options = loaded
    base = identity(loaded)
    assert identity(loaded, platform=PLATFORM.replace("H100", "H200")) != base
    assert identity(loaded, policy=FixedPolicy("torch")) != base
    assert identity(loaded, options=dataclasses.replace(options, linear="torch")) != base
    assert identity(loaded, options=dataclasses.replace(options, rank=1)) != base
    name = next(iter(programs))
    wider = {**programs, name: dataclasses.replace(programs[name], lane_rows=programs[name].lane_rows + 1)}
    assert identity(loaded, programs=wider) != base
    edited = programs[name].program.__class__()
    edited.CopyFrom(programs[name].program)
    edited.tensors[0].shape[0] += 1  # one extent wider
    assert identity(loaded, programs={**programs, name: dataclasses.replace(programs[name], program=edited)}) != base
    fewer = dict(programs)
    del fewer[name]
    assert identity(loaded, programs=fewer) != base


def test_what_the_lowering_does_not_read_leaves_it_alike(loaded):
    _, _, options = loaded
    base = identity(loaded)
    assert identity(loaded, options=dataclasses.replace(options, host_cache_gib=1.0, gpu_memory_fraction=0.5,
                                                        measure_costs=True)) == base


def test_a_measured_policy_is_known_by_its_device_and_its_decisions(loaded, monkeypatch):
    monkeypatch.setattr(product_choice, "_MEASURED", {})
    policy = MeasuredPolicy(lambda run: 0.0, key="cuda:0", deferred=True)
    before, untimed = policy.known(), identity(loaded, policy=policy)
    assert before == ("measured on cuda:0, deferred True",)
    product_choice._MEASURED[("cuda:1", SHAPE)] = Decision(SHAPE, "torch")  # another device's: not this one's
    assert policy.known() == before
    product_choice._MEASURED[("cuda:0", SHAPE)] = Decision(SHAPE, "torch", 2.0, 1.0)
    assert policy.known() == (*before, f"{SHAPE.describe()}: torch")
    assert identity(loaded, policy=policy) != untimed


def test_a_policy_that_cannot_tell_its_answers_gives_no_identity(loaded):
    class Unknown(LinearPolicy):
        def _decide(self, shape, candidates):
            return Decision(shape, "triton")

    assert Unknown().known() is None
    assert identity(loaded, policy=Unknown()) is None


def test_measured_decisions_are_recorded_and_adopted_instead_of_timed(tmp_path, monkeypatch):
    monkeypatch.setattr(product_choice, "_MEASURED", {})
    other = ProductShape(8, (32, 16), 64, "bfloat16xbfloat16->bfloat16", "add+rms_norm+matmul*2", bias=True)
    decisions = [Decision(SHAPE, "torch", 3.5, 1.25), Decision(other, "triton", 1.0, 2.0),
                 Decision(ProductShape(2, (8,), 8, "f", "matmul"), "torch")]  # untimed: not recorded
    record = tmp_path / "products" / "identity.json"
    assert product_choice.save_decisions(record, decisions)
    recorded = product_choice.recorded_decisions(record)
    assert recorded == {d.shape: d for d in decisions[:2]}
    assert not product_choice.save_decisions(None, decisions)

    timed = []
    policy = MeasuredPolicy(lambda run: timed.append(run) or 1e-6, key="cuda:0", deferred=True)
    fresh = ProductShape(4, (16,), 16, "bfloat16xbfloat16->bfloat16", "matmul")
    for shape in (SHAPE, fresh):
        assert policy.choose(shape, lambda: ("triton run", "torch run")) == "triton"  # provisional
    assert policy.adopt(recorded) == 1  # SHAPE, as recorded; `other` was not asked for
    assert policy.measure_pending() == 1  # only the fresh shape is timed
    assert timed == ["triton run", "torch run"]
    assert {d.shape: d.path for d in policy.decisions} == {SHAPE: "torch", fresh: "torch"}
    assert product_choice._MEASURED[("cuda:0", SHAPE)] == recorded[SHAPE]  # later loads of the process too
    assert FixedPolicy("torch").adopt(recorded) == 0


@pytest.mark.parametrize("text", ["not json", '[{"rows": 1}]', '[{"rows": 0, "columns": [8], "k": 8, "dtype": "f", '
                                  '"fusion": "matmul", "bias": false, "path": "torch", "triton_us": 1, "torch_us": 2}]',
                                  '[{"rows": 1, "columns": [8], "k": 8, "dtype": "f", "fusion": "matmul", '
                                  '"bias": false, "path": "cuda", "triton_us": 1, "torch_us": 2}]'])
def test_a_products_record_that_cannot_be_read_is_not_used(tmp_path, text):
    record = tmp_path / "record.json"
    record.write_text(text)
    assert product_choice.recorded_decisions(record) is None
    assert product_choice.recorded_decisions(tmp_path / "absent.json") is None


def test_preloaded_decisions_answer_the_lowering_as_recorded_and_leave_only_unrecorded_shapes_pending(monkeypatch):
    """A warm start gives its recorded decisions before lowering (`preload`): the lowering's first
    question for a recorded shape gets the recorded path, not the provisional "triton", and only a
    shape the record lacks stays pending (timed, then lowered again: native_model.py)."""
    monkeypatch.setattr(product_choice, "_MEASURED", {})
    timed = []
    policy = MeasuredPolicy(lambda run: timed.append(run) or 1e-6, key="cuda:0", deferred=True)
    fresh = ProductShape(4, (16,), 16, "bfloat16xbfloat16->bfloat16", "matmul")
    recorded = {SHAPE: Decision(SHAPE, "torch", 3.5, 1.25)}
    policy.preload(recorded)
    assert policy.choose(SHAPE, lambda: pytest.fail("a recorded shape is not timed")) == "torch"
    assert policy.choose(fresh, lambda: ("triton run", "torch run")) == "triton"  # provisional
    assert [d.shape for d in policy.decisions] == [SHAPE]  # what the lowering asked for, as asked
    assert product_choice._MEASURED[("cuda:0", SHAPE)] == recorded[SHAPE]
    assert policy.measure_pending() == 1 and timed == ["triton run", "torch run"]
    assert policy.measure_pending() == 0  # nothing left: the plans lowered after it are final
    # a decision this process measured itself outranks the record
    product_choice._MEASURED[("cuda:0", fresh)] = Decision(fresh, "triton", 1.0, 2.0)
    other = MeasuredPolicy(lambda run: 1e-6, key="cuda:0", deferred=True)
    other.preload({fresh: Decision(fresh, "torch", 2.0, 1.0)})
    assert other.choose(fresh, lambda: ("a", "b")) == "triton"
    FixedPolicy("torch").preload(recorded)  # other policies take nothing
    assert FixedPolicy("torch").choose(SHAPE, lambda: ("a", "b")) == "torch"


def test_the_recorded_kernels_compiled_ahead_are_taken_only_for_the_identity_they_were_compiled_for(monkeypatch):
    """A warm start compiles its recorded kernels on a thread while the weights load; the kernels
    phase takes that result only where the identity it computes then is the one guessed at the end
    of verify, and a failure on the thread is raised there."""
    calls = []

    def compile_recorded(identity, device):
        calls.append(identity)
        if identity == "broken":
            raise RuntimeError("the recorded kernels did not load")
        return native_model.CompiledPlans(3)

    monkeypatch.setattr(native_model, "compile_recorded", compile_recorded)
    cpu = native_model.torch.device("cpu")
    not_read = native_model._NOT_READ
    assert native_model._RecordedAhead("a", cpu).result("a") == native_model.CompiledPlans(3)
    assert native_model._RecordedAhead("a", cpu).result("b") is not_read  # tuning changed what the load decides
    assert native_model._RecordedAhead("a", cpu).result(None) is not_read
    with pytest.raises(RuntimeError, match="did not load"):
        native_model._RecordedAhead("broken", cpu).result("broken")
    assert calls == ["a", "a", "a", "broken"]


def test_a_record_the_thread_found_unusable_is_not_read_again(monkeypatch):
    """Where the thread found the identity's recorded kernels unusable (None), the kernels phase
    forgets the load record and measures as a cold load, without compiling the record a second time;
    where no thread read them for the identity, it compiles them itself."""
    calls, forgotten = [], []
    monkeypatch.setattr(native_model, "recorded_load_memory", lambda record: native_model.LoadMemory(1, 2))
    monkeypatch.setattr(native_model, "forget_record", forgotten.append)
    monkeypatch.setattr(native_model, "compile_recorded", lambda identity, device: calls.append(identity))
    cpu = native_model.torch.device("cpu")
    policy = FixedPolicy("triton")
    assert native_model._recorded_load("a", policy, cpu, None) is None
    assert calls == [] and forgotten == [native_model.load_record("a")]
    assert native_model._recorded_load("a", policy, cpu) is None  # not read ahead: compiled here, unusable too
    assert calls == ["a"] and len(forgotten) == 2


def test_a_failed_load_waits_for_the_thread_compiling_ahead(monkeypatch):
    """A load that fails before its kernels phase takes the thread's result leaves no thread running:
    `abandon` returns once the compile it started has ended."""
    import threading
    import time

    started, ended = threading.Event(), threading.Event()

    def compile_recorded(identity, device):
        started.set()
        time.sleep(0.2)
        ended.set()

    monkeypatch.setattr(native_model, "compile_recorded", compile_recorded)
    ahead = native_model._RecordedAhead("a", native_model.torch.device("cpu"))
    assert started.wait(5)
    ahead.abandon()
    assert ended.is_set()


def test_no_kernels_are_compiled_ahead_on_a_cpu(loaded):
    core, programs, options = loaded
    policy = FixedPolicy("triton")
    cpu = native_model.torch.device("cpu")
    assert native_model._RecordedAhead.start(core.contract, core.manifest, programs, options, policy, cpu) is None
