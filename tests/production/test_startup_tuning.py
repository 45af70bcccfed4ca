"""Startup tuning bindings in both runtimes, on the offset-norm test recipe
(helios/ignition/preparation/tuning.py): the `norm_weights` producer runs before any serving graph
(instrumented executors: the reference interpreter's `execute`, production's `LaunchPlan.run`),
its TUNED buffers are byte-equal between the runtimes (conformance/tuning.py), the served tokens
equal the plain core's, and load refuses producers and bindings that overlap what rounds write."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conformance.tuning import tuned_buffer_cases
from helios.errors import HeliosError
from helios.ignition.preparation.tuning import PRODUCER, offset_norm_storage, tuned_buffer
from helios.ignition.prepare import PreparedCore, PreparedResource
from helios.production import native_model
from helios.production.native_model import LoadOptions, NativeModel, StartupFailed
from helios.production.plan import LaunchPlan
from helios.proto import contract_pb2, manifest_pb2, program_pb2
from helios.reference import executor as reference_executor
from helios.reference.engine import ReferenceEngine
from helios.runtime.request import GenerationRequest, SamplingParams
from helios.runtime.tuning import StartupTuning, TuningRefused
from tests.production.helpers import DEVICE, PAGES, PROMPT

C, M, P = contract_pb2, manifest_pb2, program_pb2
OFFSET = 1.0


@pytest.fixture(scope="module")
def tuned(cores):
    """(plain core, the same core with offset norm storage)."""
    plain = cores("llama")
    return plain, offset_norm_storage(plain, offset=OFFSET)


def _greedy(engine: ReferenceEngine, steps: int = 4) -> list[int]:
    request = GenerationRequest(PROMPT, max_tokens=steps, sampling=SamplingParams(temperature=0.0), ignore_eos=True)
    return list(engine.generate(request))


def _expected(core) -> dict[str, np.ndarray]:
    """What `norm_weights` must write: each stored weight plus the offset, computed here in fp32."""
    producer = P.Program.FromString(core.read(core.manifest.tuning_catalog[0].program_resources[0]))
    return {tuned_buffer(d.resource): np.frombuffer(core.read(d.resource), dtype="<f4") + np.float32(OFFSET)
            for d in producer.tensors if d.role == P.TENSOR_ROLE_WEIGHT}


def _tuned_tensors(core) -> dict[str, dict[str, str]]:
    """graph -> {TUNED tensor name: its buffer}."""
    out = {}
    for handle in core.manifest.graphs:
        program = P.Program.FromString(core.read(handle.program_resources[0]))
        out[handle.name] = {d.name: d.buffer for d in program.tensors if d.role == P.TENSOR_ROLE_TUNED}
    return out


def test_the_recipe_stores_offset_weights_and_binds_them(tuned):
    plain, core = tuned
    (handle,) = core.manifest.tuning_catalog
    assert handle.name == PRODUCER
    expected = _expected(core)
    assert len(expected) == 2 * 2 + 1  # two norms per layer of the tiny checkpoint and the final norm
    for buffer in expected:
        resource = buffer.removeprefix("tuned/")
        stored = np.frombuffer(core.read(resource), dtype="<f4")
        np.testing.assert_array_equal(stored, np.frombuffer(plain.read(resource), dtype="<f4") - np.float32(OFFSET))
    tensors = _tuned_tensors(core)
    for graph in core.contract.model.graphs:
        bound = {t.buffer for t in graph.tuned_bindings}
        assert set(tensors[graph.name].values()) == bound
        assert all(t.producer == PRODUCER for t in graph.tuned_bindings)
    assert tensors["decode_b1"] and not tensors["initialization"]  # initialization reads no norm


def test_no_serving_graph_runs_before_its_producers(tuned, monkeypatch):
    plain, core = tuned
    expected = _expected(core)
    tensors = _tuned_tensors(core)
    plain_tokens = _greedy(ReferenceEngine.load(plain, pages=PAGES))

    # reference: every program the executor interprets goes through `execute`
    ran: list[tuple[str, bool]] = []
    interpret = reference_executor.execute

    def instrumented(program, bound, operators=None):
        filled = all(np.array_equal(bound[b], expected[b]) for b in tensors.get(program.graph, {}).values())
        ran.append((program.graph, filled))
        return interpret(program, bound, operators)

    monkeypatch.setattr(reference_executor, "execute", instrumented)
    engine = ReferenceEngine.load(core, pages=PAGES)
    tokens = _greedy(engine)
    assert ran[0] == (PRODUCER, True) and [g for g, _ in ran].count(PRODUCER) == 1
    assert len(ran) > 2 and all(filled for _, filled in ran)
    assert tokens == plain_tokens  # (w - 1) + 1: the plain core's tokens

    # production: every plan run (the costs phase measures rounds at load; then the rounds)
    runs: list[tuple[str, bool]] = []
    run = LaunchPlan.run

    def instrumented_run(plan, **kwargs):
        if DEVICE.type == "cuda" and torch.cuda.is_current_stream_capturing():
            return run(plan, **kwargs)  # capture records the launches: nothing runs, nothing to read
        filled = all(np.array_equal(plan.tensors[name].cpu().numpy(), expected[buffer])
                     for name, buffer in tensors.get(plan.graph, {}).items())
        runs.append((plan.graph, filled))
        return run(plan, **kwargs)

    monkeypatch.setattr(LaunchPlan, "run", instrumented_run)
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES, measure_costs=True))
    names = [p.name for p in native.startup]
    assert names.index("tuning") < names.index("kernels") < names.index("graphs") < names.index("costs")
    driven = ReferenceEngine.load(core, pages=PAGES)  # the reference's loop over the production executor
    loaded = len(runs)
    driven.executor = native.executor
    assert _greedy(driven) == tokens
    assert runs[0] == (PRODUCER, True) and [g for g, _ in runs].count(PRODUCER) == 1
    assert loaded > 1  # serving plans ran at load (kernels, costs; on a GPU the capture's warm-up)
    if DEVICE.type == "cpu":  # on a GPU the rounds replay the captured graphs instead of running plans
        assert len(runs) > loaded
    assert all(filled for _, filled in runs)


def test_tuned_buffers_are_byte_equal_between_the_runtimes(tuned):
    _, core = tuned
    cases = tuned_buffer_cases(core, device=str(DEVICE), dtype="f32")
    assert {c.case for c in cases} == {f"tuning/{b}" for b in _expected(core)}
    assert all(c.verdict == "pass" for c in cases), [c.divergence for c in cases if c.divergence]
    reference = reference_executor.ReferenceExecutor.load(core, pages=1)
    for buffer, values in _expected(core).items():
        assert reference.buffers[buffer].tobytes() == values.tobytes()


def test_a_differing_tuned_buffer_is_a_divergence(tuned, monkeypatch):
    _, core = tuned
    run_tuning = native_model._run_tuning

    def off_by_one_ulp(*args, **kwargs):
        out = run_tuning(*args, **kwargs)
        first = next(iter(out.values()))
        first[0] = float(np.nextafter(np.float32(first[0].item()), np.float32(np.inf)))  # one fp32 ulp
        return out

    monkeypatch.setattr(native_model, "_run_tuning", off_by_one_ulp)
    cases = tuned_buffer_cases(core, device=str(DEVICE), dtype="f32")
    diverged = [c for c in cases if c.verdict == "divergence"]
    assert len(diverged) == 1 and diverged[0].divergence.field.endswith("[0]")


def _edited(core: PreparedCore, *, serving=None, manifest=None, programs=None) -> PreparedCore:
    programs = programs or {}
    resources = tuple(PreparedResource(r.id, r.kind, (lambda data: lambda: data)(
        programs[r.id].SerializeToString(deterministic=True))) if r.id in programs else r
        for r in core.resource_list)
    return PreparedCore(serving or core.contract, manifest or core.manifest, resources)


def _load_errors(core) -> list[str]:
    messages = []
    for load in (lambda: ReferenceEngine.load(core, pages=PAGES),
                 lambda: NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))):
        with pytest.raises(HeliosError) as raised:
            load()
        messages.append(str(raised.value))
    return messages


def test_a_tuned_binding_overlapping_a_request_input_fails_load(tuned):
    _, core = tuned
    serving = C.ServingContract()
    serving.CopyFrom(core.contract)
    graph = next(g for g in serving.model.graphs if g.name == "decode_b1")
    graph.tuned_bindings[0].buffer = graph.value_bindings[0].destination  # a request input
    for message in _load_errors(_edited(core, serving=serving)):
        assert "\n" not in message and "tuned_bindings[0].buffer" in message and "request input" in message


def test_a_producer_writing_state_fails_load(tuned):
    _, core = tuned
    resource = core.manifest.tuning_catalog[0].program_resources[0]
    program = P.Program.FromString(core.read(resource))
    written = next(d for d in program.tensors if d.role == P.TENSOR_ROLE_TUNED)
    manifest = M.ExecutionManifest()
    manifest.CopyFrom(core.manifest)
    manifest.buffers.append(M.BufferDescriptor(name="norm_state", role=M.BUFFER_ROLE_STATE, dtype=written.dtype,
                                               shape=list(written.shape)))
    written.role, written.buffer = P.TENSOR_ROLE_STATE, "norm_state"  # its output lands in writable state
    messages = _load_errors(_edited(core, manifest=manifest, programs={resource: program}))
    for message in messages:
        assert "\n" not in message and f"tuning producer {PRODUCER!r}" in message and "cannot overlap" in message


def test_a_serving_program_reading_an_unbound_tuned_buffer_fails_load(tuned):
    _, core = tuned
    serving = C.ServingContract()
    serving.CopyFrom(core.contract)
    graph = next(g for g in serving.model.graphs if g.name == "decode_b1")
    del graph.tuned_bindings[-1]
    for message in _load_errors(_edited(core, serving=serving)):
        assert "\n" not in message and "decode_b1" in message and "tuned_bindings do not name" in message


def test_startup_failed_names_the_tuning_phase(tuned):
    _, core = tuned
    serving = C.ServingContract()
    serving.CopyFrom(core.contract)
    del next(g for g in serving.model.graphs if g.name == "decode_b1").tuned_bindings[-1]
    with pytest.raises(StartupFailed, match=r"^tuning: "):
        NativeModel.load(_edited(core, serving=serving), LoadOptions(device=str(DEVICE), pages=PAGES))


def _serving_programs(core) -> dict[str, list[P.Program]]:
    return {h.name: [P.Program.FromString(core.read(r)) for r in h.program_resources] for h in core.manifest.graphs}


def test_a_producer_that_never_writes_one_of_its_buffers_is_refused(tuned):
    _, core = tuned
    manifest = M.ExecutionManifest()
    manifest.CopyFrom(core.manifest)
    manifest.buffers.append(M.BufferDescriptor(name="tuned/unwritten", role=M.BUFFER_ROLE_TUNED, dtype=M.DTYPE_F32,
                                               shape=[4], producer=PRODUCER))
    with pytest.raises(TuningRefused, match=r"never writes its TUNED buffer 'tuned/unwritten'"):
        StartupTuning.resolve(core.contract, manifest, core.read, _serving_programs(core))


def test_a_producer_reading_a_later_producers_buffer_is_refused(tuned):
    _, core = tuned
    manifest = M.ExecutionManifest()
    manifest.CopyFrom(core.manifest)
    later = M.GraphHandle(name="later", operation=C.OPERATION_UNSPECIFIED, program_resources=["program/later/rank0"])
    manifest.tuning_catalog.append(later)
    manifest.buffers.append(M.BufferDescriptor(name="tuned/later", role=M.BUFFER_ROLE_TUNED, dtype=M.DTYPE_F32,
                                               shape=[4], producer="later"))
    resource = core.manifest.tuning_catalog[0].program_resources[0]
    program = P.Program.FromString(core.read(resource))
    program.tensors.append(P.TensorDecl(name="peek", role=P.TENSOR_ROLE_TUNED, dtype=M.DTYPE_F32, shape=[4],
                                        buffer="tuned/later"))
    edited = _edited(core, manifest=manifest, programs={resource: program})
    with pytest.raises(TuningRefused, match=r"reads TUNED buffer 'tuned/later' of producer 'later', which does not"):
        StartupTuning.resolve(edited.contract, manifest, edited.read, _serving_programs(core))


def test_only_the_producers_selected_graphs_need_run(tuned):
    _, core = tuned
    programs = _serving_programs(core)
    assert [p.name for p in StartupTuning.resolve(core.contract, core.manifest, core.read, programs).producers] \
        == [PRODUCER]
    untuned = {"initialization": programs["initialization"]}  # reads no norm: needs no producer
    assert StartupTuning.resolve(core.contract, core.manifest, core.read, untuned).producers == ()
