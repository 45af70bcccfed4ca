"""NativeModel on tiny prepared cores (fp32, CPU: Triton in the interpreter): the reference engine's
sequential loop drives the production executor through the executor seam, and greedy tokens equal
the reference engine's own; startup phases, execution geometry and startup failures."""

from __future__ import annotations

import pytest

from helios.contract import StartupOptions
from helios.errors import HeliosError
from helios.production.native_model import LoadOptions, NativeModel, StartupFailed
from helios.proto import manifest_pb2
from helios.reference.engine import ReferenceEngine
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.production.helpers import DEVICE, GPU, PAGES, PROMPT


def _greedy(engine: ReferenceEngine, steps: int, sampling: SamplingParams | None = None) -> list[int]:
    request = GenerationRequest(PROMPT, max_tokens=steps, sampling=sampling or SamplingParams(temperature=0.0),
                                ignore_eos=True)
    return list(engine.generate(request))


@pytest.mark.parametrize("family", ["qwen3", "mistral"])
def test_greedy_tokens_equal_the_reference_engine(cores, family):
    core = cores(family)
    reference = ReferenceEngine.load(core, pages=PAGES)
    driven = ReferenceEngine.load(core, pages=PAGES)
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    driven.executor = native.executor  # the reference's loop, the production executor underneath
    assert _greedy(driven, 4) == _greedy(reference, 4)


def test_seeded_sampling_equals_the_reference_engine(cores):
    core = cores("qwen3")
    reference = ReferenceEngine.load(core, pages=PAGES)
    driven = ReferenceEngine.load(core, pages=PAGES)
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    driven.executor = native.executor
    sampling = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, seed=1234)
    assert _greedy(driven, 4, sampling) == _greedy(reference, 4, sampling)


def test_startup_phases_geometry_and_fusion(cores):
    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES,
                                                         startup=StartupOptions(max_concurrency=1)))
    assert [p.name for p in native.startup] == ["verify", "weights", "tuning", "kernels", "cache", "graphs", "host_tier"]
    assert all(p.seconds >= 0 for p in native.startup)
    (manifest,) = native.manifests
    caches = [b for b in manifest.buffers if b.role == manifest_pb2.BUFFER_ROLE_CACHE]
    assert caches and all(b.shape[0] == PAGES for b in caches)
    # load-time selection reduced concurrency: the batch-2 decode graph is not loaded
    assert "decode_b2" not in native.graphs and "decode_b1" in native.graphs
    kernels = native.graphs["decode_b1"].plan.kernels
    # the residual add and norm fuse: into one kernel, or on a GPU into the product reading them where
    # the product policy times that faster
    assert any(k == "add+rms_norm" or k.startswith("add+rms_norm+matmul") for k in kernels), kernels
    assert "head_rms_norm+rotary & head_rms_norm+rotary+paged_cache_write*2" in kernels


def test_missing_graph_variant_fails_startup(cores):
    core = cores("qwen3")

    class Broken:
        contract, manifest = core.contract, manifest_pb2.ExecutionManifest()

        def read(self, resource_id):
            return core.read(resource_id)

    Broken.manifest.CopyFrom(core.manifest)
    for handle in Broken.manifest.graphs:
        if handle.name == "decode_b1":
            del handle.program_resources[:]
    # the contract decode (verify phase) rejects it before any weight is read
    with pytest.raises(HeliosError, match="program"):
        NativeModel.load(Broken(), LoadOptions(device=str(DEVICE), pages=PAGES))
    with pytest.raises(StartupFailed):
        LoadOptions(gpu_memory_fraction=1.5)


def test_fused_and_unfused_plans_compute_the_same_round(cores):
    """Fusion is a lowering decision only: the fused plan's completion and cache equal the unfused plan's."""
    import numpy as np
    import torch

    from helios.production.buffers import ScratchArena
    from helios.production.lowering import lower_program

    core = cores("qwen3")
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    graph = native.graphs["prefill_p16"]
    lanes = [_lane(0, PROMPT[:16])]
    native.executor._pack(graph, lanes)
    program, operators = _program(core, "prefill_p16")
    results = []
    for fuse in (True, False):
        for name, tensor in native.executor.buffers.items():
            if native.executor.staging.get(name) is None and tensor.is_floating_point():
                tensor.zero_()  # cache planes start empty for both plans
        plan = lower_program(program, operators, weights=graph.plan.tensors | _weights(native, program),
                             buffers=native.executor.buffers, arena=ScratchArena(DEVICE), device=DEVICE, fuse=fuse)
        plan.run()
        results.append({n: t.detach().clone() for n, t in native.executor.buffers.items()})
        assert ("add+rms_norm" in plan.kernels) == fuse
    fused, unfused = results
    bound = _gpu_rounding_bound(program)
    for name in fused:
        a, b = fused[name].float().cpu().numpy(), unfused[name].float().cpu().numpy()
        if not GPU:  # the interpreter runs both plans' arithmetic in NumPy, in one order
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6, err_msg=name)
        elif not fused[name].is_floating_point():
            np.testing.assert_array_equal(a, b, err_msg=name)
        else:
            finite = np.abs(b[np.isfinite(b)])
            scale = float(finite.max()) if finite.size else 0.0
            np.testing.assert_allclose(a, b, rtol=0.0, atol=bound * scale, err_msg=f"{name} (bound {bound:.2e})")
    assert torch.equal(fused["completion.sampled_ids"], unfused["completion.sampled_ids"])


def _gpu_rounding_bound(program) -> float:
    """The rounding a GPU allows between the fused and the unfused plan of `program`, relative to the
    largest magnitude of the tensor compared.

    On a GPU a fused launch and the unfused launches of the same operators are different kernels:
    the compiler contracts multiplies and adds into FMAs differently, and each reduction (a product's
    K loop, cuBLAS's split of K, a norm's or softmax's sum across a warp) is ordered by its tile, so
    the two plans round one real-arithmetic value differently. A sum of n terms in any order lies
    within n·u of the exact sum, relative to the sum of the terms' magnitudes (first order; Higham,
    Accuracy and Stability of Numerical Algorithms, 2nd ed., section 3.1; u = 2^-24 in fp32), so two
    orders differ by at most 2·n·u; along the program the first-order errors of the reductions a
    value passes through add. The bound is 2·u·S, S the sum over every operator of the program of
    its reduction extent (K of a product, the width of a norm, head_dim plus the keys of attention:
    at most the round's rows, since the cache starts empty) and 1 for an operator that reduces
    nothing (one rounding): every operator counts, on the value's path or not, so S bounds the
    reductions of any value. For the 3-layer tiny qwen3 prefill of 16 rows S is about 2,300, a bound
    of about 2.7e-4 of the tensor's magnitude (the H200 measured differences in the seventh
    significant digit); a fusion that changes the meaning (a missed rounding, a wrong weight, eps or
    offset) moves values by orders of magnitude more."""
    shapes = {t.name: [int(e) for e in t.shape] for t in program.tensors}
    steps = 0
    for op in program.operators:
        inputs = [shapes[name] for name in op.inputs if name in shapes]
        if op.op in ("matmul", "logits", "rms_norm", "layer_norm"):
            steps += inputs[0][-1]
        elif op.op == "head_rms_norm":
            steps += inputs[1][-1]  # the weight's extent: head_dim
        elif op.op == "paged_attention":
            steps += inputs[1][-1] + inputs[0][0]  # scores over head_dim, then sums over the keys
        else:
            steps += 1
    return 2.0 * 2.0**-24 * steps


def test_a_completion_that_disagrees_with_its_round_is_rejected(cores):
    """The executor hands back its rows as read; the one validator rejects one that disagrees."""
    from helios.runtime.completion import CompletionInvalid, validate_round

    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    executor = native.executor
    lanes = [_lane(0, PROMPT[:16])]
    rows = executor.run_round("prefill_p16", lanes)
    checks = {"sequence": executor.sequence, "sampled_tokens": native.contract.vocabulary.sampled_tokens,
              "page_tokens": native.contract.cache.page_tokens, "frame": 0}
    validate_round("prefill_p16", lanes, rows, **checks)  # the row as read is the round's
    bad = type(rows[0])(**{**{f: getattr(rows[0], f) for f in rows[0].__dataclass_fields__}, "generation": 99})
    with pytest.raises(CompletionInvalid, match="generation echo 99"):
        validate_round("prefill_p16", lanes, [bad], **checks)


def _lane(slot: int, tokens: tuple[int, ...]):
    from helios.runtime.packing import LaneInput

    return LaneInput(slot=slot, generation=1, consumed=0, tokens=tokens, prompt_tokens_in_round=len(tokens),
                     samples=True, page_ids=tuple(range(8)), seed=5, sampling=SamplingParams(temperature=0.0),
                     output_limit=8, eos_ids=(1,), prompt_token_ids=tokens)


def _program(core, name: str):
    from helios.program import validate_program
    from helios.proto import program_pb2

    handle = next(h for h in core.manifest.graphs if h.name == name)
    program = program_pb2.Program.FromString(core.read(handle.program_resources[0]))
    return program, validate_program(program, core.manifest.buffers)


def _weights(native, program):
    from helios.proto import program_pb2

    return {d.resource: native.graphs["prefill_p16"].plan.tensors[d.name] for d in program.tensors
            if d.role == program_pb2.TENSOR_ROLE_WEIGHT}


def _recorded_forms(native: NativeModel, monkeypatch) -> list[str]:
    """The rank form of every sampling run from here on, in order: a GPU's replays of the captured
    forms, a CPU's plan runs."""
    from helios.production.plan import LaunchPlan

    forms: list[str] = []
    capture = native.executor.capture
    if capture is not None:
        replay = capture.replay
        monkeypatch.setattr(capture, "replay", lambda name, *, rank_form="own": (
            forms.append(rank_form), replay(name, rank_form=rank_form)))
    else:
        run = LaunchPlan.run
        monkeypatch.setattr(LaunchPlan, "run", lambda plan, *, rank_form="own": (
            forms.append(rank_form), run(plan, rank_form=rank_form)))
    return forms


def test_a_round_runs_the_rank_stage_only_when_a_sampling_lane_filters_by_rank(cores, monkeypatch):
    """top-k, top-p or min-p on a lane that samples this round selects the graph's form with the
    sampler's rank stage, the torch sort's where the filters could make a chunked rank stage stream
    the row (top-p without top-k, a top-k past its candidates); greedy lanes, plain temperature and
    lanes that do not sample select the form without one."""
    import dataclasses

    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    graph = native.graphs["prefill_p16"]
    assert graph.plan.rank_filters is not None
    forms = _recorded_forms(native, monkeypatch)
    plain = _lane(0, PROMPT[:16])
    for sampling, samples, expected in [(SamplingParams(temperature=0.0, top_k=3), True, "off"),
                                        (SamplingParams(temperature=0.8), True, "off"),
                                        (SamplingParams(temperature=0.8, top_p=0.5), True, "sort"),
                                        (SamplingParams(temperature=0.8, top_k=300, top_p=0.5), True, "sort"),
                                        (SamplingParams(temperature=0.8, top_k=4, top_p=0.5), True, "own"),
                                        (SamplingParams(temperature=0.8, top_k=4), True, "own"),
                                        (SamplingParams(temperature=0.8, min_p=0.1), True, "own"),
                                        (SamplingParams(temperature=0.8, top_k=4), False, "off")]:
        assert sampling.rank_filtered is (expected != "off" or not samples)
        native.run_round("prefill_p16", [dataclasses.replace(plain, sampling=sampling, samples=samples)])
        assert forms.pop() == expected
        assert graph.plan.rank_filters.form == "own"  # the switch is set again after the round
    # this core's vocabulary fits the fused rank stage: no sort form is captured beside it
    assert graph.plan.forms() == ("own", "off")
    assert graph.plan.warm_forms() == ("own",)  # the off form runs nothing the own form's run does not


def test_a_chunked_sampler_draws_the_reference_engine_tokens_in_each_of_its_forms(cores, monkeypatch):
    """A vocabulary past the fused rank stage's (made small here: 288 ids in one chunk of 512, 8
    candidates) gets the chunked sampler and a third form of each sampling graph with the torch sort;
    seeded draws equal the reference engine's whichever form a round selects: the chunked form for
    top-k within the candidates (alone, with top-p) and min-p alone, the sort for top-p alone and a
    top-k past the candidates (sorting a graph's rows two at a time)."""
    from helios.production.kernels import sampling as kernels

    monkeypatch.setattr(kernels, "SORT_ROWS", 2)
    monkeypatch.setattr(kernels, "FUSED_RANK_VOCAB", 64)
    monkeypatch.setattr(kernels, "RANK_CANDIDATES", 8)
    monkeypatch.setattr(kernels, "RANK_SPAN", 32)
    core = cores("qwen3")
    reference = ReferenceEngine.load(core, pages=PAGES)
    driven = ReferenceEngine.load(core, pages=PAGES)
    native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))
    driven.executor = native.executor
    assert native.graphs["prefill_p16"].plan.forms() == ("own", "off", "sort")
    assert native.graphs["prefill_p16"].plan.warm_forms() == ("own", "sort")
    forms = _recorded_forms(native, monkeypatch)
    for expected, sampling in [("own", SamplingParams(temperature=0.9, top_k=6, seed=11)),
                               ("own", SamplingParams(temperature=0.9, top_k=8, top_p=0.6, seed=12)),
                               ("own", SamplingParams(temperature=0.9, min_p=0.2, seed=13)),
                               ("sort", SamplingParams(temperature=0.9, top_p=0.8, seed=14)),
                               ("sort", SamplingParams(temperature=0.9, top_k=40, top_p=0.9, seed=15))]:
        forms.clear()
        tokens = _greedy(driven, 4, sampling)
        assert tokens == _greedy(reference, 4, sampling), sampling
        assert set(forms) - {"off"} == {expected}, (sampling, forms)  # "off": rounds that sample nothing


def test_request_rows_are_packed_again_when_their_request_changes(cores):
    """Rows packed once per request (seed, histogram, ...) follow a new request in the same slot,
    even one that reuses the slot's generation."""
    import dataclasses

    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    executor, graph = native.executor, native.graphs["prefill_p16"]
    first = _lane(0, PROMPT[:16])
    executor._pack(graph, [first])
    executor._pack(graph, [first])  # unchanged: skipped
    second = dataclasses.replace(first, seed=77, prompt_token_ids=(9, 9, 9))
    executor._pack(graph, [second])
    assert int(executor.host_view["lane_seed"][0]) == 77
    histogram = executor.host_view["lane_prompt_histogram"][0]
    assert histogram[9] == 3 and histogram.sum() == 3


def test_a_submission_that_fails_to_pack_still_takes_its_sequence(cores):
    """The transport numbers every submission: after one that cannot be packed, the next round's
    completion answers the following sequence (a scheduler numbered it so)."""
    from helios.runtime.packing import LaneOverflow

    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    executor = native.executor
    before = executor.sequence
    with pytest.raises(LaneOverflow):
        executor.run_round("prefill_p8", [_lane(0, PROMPT[:9])])  # 9 tokens in an 8-token graph
    (row,) = executor.run_round("prefill_p8", [_lane(0, PROMPT[:8])])
    assert executor.sequence == before + 2 and row.submission_sequence == before + 2


def test_page_table_rows_upload_only_the_plans_updates(cores):
    """A slot's page-table row is written from the plan's updates alone: a whole-row update (a new
    slot generation) writes and uploads the row, padding included; an update from entry k writes and
    uploads the entries from k; a round without updates uploads no page-table entry."""
    import dataclasses

    from helios.proto import contract_pb2
    from helios.runtime.rounds import PageTableUpdate

    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    executor, graph = native.executor, native.graphs["prefill_p16"]
    (table,) = [b.destination for b in graph.packing.bindings if b.source == contract_pb2.VALUE_SOURCE_PAGE_TABLE]
    uploads = []
    executor._upload = lambda name, row=None, columns=None: uploads.append((name, row, columns))

    def pack(lane, *updates):
        uploads.clear()
        executor._pack(graph, [lane], updates)
        return [(row, columns) for name, row, columns in uploads if name == table], executor.host_view[table][1]

    first = dataclasses.replace(_lane(1, PROMPT[:4]), page_ids=(3, 4))
    sent, row = pack(first, PageTableUpdate(1, 0, (3, 4)))
    assert sent == [(1, None)] and list(row[:3]) == [3, 4, 0]
    sent, _ = pack(first)
    assert sent == []  # no update: nothing uploaded
    sent, row = pack(dataclasses.replace(first, page_ids=(3, 4, 9)), PageTableUpdate(1, 2, (9,)))
    assert sent == [(1, slice(2, 3))] and list(row[:4]) == [3, 4, 9, 0]  # the new entry alone
    sent, row = pack(dataclasses.replace(first, generation=2, page_ids=(7,)), PageTableUpdate(1, 0, (7,)))
    assert sent == [(1, None)] and list(row[:4]) == [7, 0, 0, 0]  # a new generation: the whole row
    assert executor.page_entries_uploaded == 4


def test_request_rows_follow_the_binding_that_packed_them(cores):
    """A physical row packed by one graph's binding is packed again for a graph whose binding of the
    same destination differs (offset), or after a submission-row binding overwrote the rows."""
    import dataclasses

    from helios.production.executor import NativeExecutor
    from helios.proto import contract_pb2

    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    graph = native.graphs["decode_b1"]
    (generation,) = [b for b in graph.packing.bindings if b.source == contract_pb2.VALUE_SOURCE_GENERATION]

    def variant(name, binding):
        return dataclasses.replace(graph, name=name, packing=dataclasses.replace(graph.packing, graph=name,
                                                                                 bindings=(binding,)))

    shifted = variant("shifted", dataclasses.replace(generation, offset=100))
    by_row = variant("by_row", dataclasses.replace(generation, indexing=contract_pb2.INDEXING_SUBMISSION_ROW,
                                                   rows=1, padding=-7))
    executor = NativeExecutor({"decode_b1": graph, "shifted": shifted, "by_row": by_row}, native.executor.buffers,
                              native.executor.completion, device=DEVICE, capture=None)
    rows = executor.host_view[generation.destination]
    lane = dataclasses.replace(_lane(1, (5,)), generation=3)
    executor._pack(graph, [lane])
    assert rows[1] == 3
    executor._pack(shifted, [lane])
    assert rows[1] == 103
    executor._pack(graph, [lane])
    assert rows[1] == 3
    other = dataclasses.replace(_lane(0, (5,)), generation=4)
    executor._pack(graph, [other])
    executor._pack(by_row, [lane])  # submission row 0 holds slot 1's generation now
    assert rows[0] == 3
    executor._pack(graph, [other])
    assert rows[0] == 4
    per_round = variant("per_round", dataclasses.replace(generation, source=contract_pb2.VALUE_SOURCE_QUERY_LENGTH))
    executor = NativeExecutor({"decode_b1": graph, "per_round": per_round}, native.executor.buffers,
                              native.executor.completion, device=DEVICE, capture=None)
    rows = executor.host_view[generation.destination]  # this executor's staging (its own on a GPU)
    executor._pack(graph, [lane])
    executor._pack(per_round, [lane])  # packed every round: slot 1's row holds the query length 1
    assert rows[1] == 1
    executor._pack(graph, [lane])
    assert rows[1] == 3


def test_a_page_table_bound_with_two_offsets_is_packed_whole_for_each_graph(cores):
    """Graphs binding one page-table destination with different page offsets cannot share
    incremental rows: that destination is packed from the lanes every round, with each graph's offset."""
    import dataclasses

    from helios.production.executor import NativeExecutor
    from helios.proto import contract_pb2

    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    graph = native.graphs["decode_b1"]
    (table,) = [b for b in graph.packing.bindings if b.source == contract_pb2.VALUE_SOURCE_PAGE_TABLE]
    shifted = dataclasses.replace(graph, name="shifted", packing=dataclasses.replace(
        graph.packing, graph="shifted", bindings=(dataclasses.replace(table, offset=1),)))
    executor = NativeExecutor({"decode_b1": graph, "shifted": shifted}, native.executor.buffers,
                              native.executor.completion, device=DEVICE, capture=None)
    assert table.destination not in executor._page_tables
    lane = dataclasses.replace(_lane(1, (5,)), page_ids=(3, 4))
    rows = executor.host_view[table.destination]
    executor._pack(shifted, [lane], ())  # no update: the row still comes from the lane
    assert list(rows[1][:3]) == [4, 5, table.padding]
    executor._pack(graph, [lane], ())
    assert list(rows[1][:3]) == [3, 4, table.padding]


def test_the_submission_sequence_wraps_in_its_32_bit_field(cores):
    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    executor = native.executor
    executor.sequence = 2**31 - 1
    (row,) = executor.run_round("prefill_p8", [_lane(0, PROMPT[:8])])  # submission 2**31: written as 0
    assert executor.sequence == 2**31 and row.submission_sequence == 0


def test_a_row_that_failed_to_pack_is_packed_again(cores):
    """Rows packed once per request are remembered only once written: a round that failed while
    packing (here an earlier lane's prompt id outside the histogram) leaves no row marked current."""
    import dataclasses

    from helios.runtime.packing import LaneOverflow

    native = NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES))
    executor, graph = native.executor, native.graphs["decode_b2"]
    width = executor.host_view["lane_prompt_histogram"].shape[1]
    bad = dataclasses.replace(_lane(0, (5,)), prompt_token_ids=(width,))
    good = dataclasses.replace(_lane(1, (5,)), seed=99, prompt_token_ids=(3, 3))
    with pytest.raises(LaneOverflow):
        executor._pack(graph, [bad, good])
    uploads = []
    executor._upload = lambda name, row=None, columns=None: uploads.append(name)
    executor._pack(graph, [good])
    assert int(executor.host_view["lane_seed"][1]) == 99
    assert "lane_seed" in uploads  # written to staging by the failed round, never uploaded: again now
    assert executor.host_view["lane_prompt_histogram"][1][3] == 2


@pytest.fixture(scope="module")
def sealed(cores, tmp_path_factory):
    """The qwen3 tiny core sealed to a file, with its trust file."""
    from helios.core import generate_keypair
    from helios.ignition.seal import seal

    directory = tmp_path_factory.mktemp("sealed")
    key = directory / "publisher.key"
    generate_keypair(key)
    seal(cores("qwen3"), directory / "tiny.hcore", publisher="tests/tiny", signing_key=key)
    return directory / "tiny.hcore", directory / "publisher.key.pub"


def _open(sealed, **extra):
    from helios.core import open_core

    path, trust = sealed
    return open_core(path, trusted_keys=trust, accept="tests/tiny", **extra)


def test_a_sealed_core_loads_its_weights_on_several_threads(cores, sealed, monkeypatch):
    """An opened core's weights are decoded in parallel into the tensors themselves: each weight read
    once, the phases reported, the reference engine's tokens."""
    import helios.core.reader as reader_module
    from helios.proto import core_pb2

    monkeypatch.setattr(reader_module, "_PARALLEL_MIN_NBYTES", 0)  # the tiny core takes the parallel path
    decoded = []
    original = reader_module.Core.read_into

    def read_into(self, resource_id, out):
        decoded.append(resource_id)
        return original(self, resource_id, out)

    monkeypatch.setattr(reader_module.Core, "read_into", read_into)
    with _open(sealed, decoders=3) as core:  # NOTE: torch products: the weights are the subject here
        native = NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES, linear="torch"))
        weights = {r.id: r.decoded_nbytes for r in core.resources.values() if r.kind == core_pb2.RESOURCE_KIND_WEIGHT}
    assert [p.name for p in native.startup] == ["verify", "weights", "tuning", "kernels", "cache", "graphs", "host_tier"]
    assert all(p.seconds >= 0 for p in native.startup)
    assert set(weights) <= set(decoded) and len(decoded) == len(set(decoded))  # each weight decoded once
    assert native.weight_bytes == sum(weights.values())
    reference = ReferenceEngine.load(cores("qwen3"), pages=PAGES)
    driven = ReferenceEngine.load(cores("qwen3"), pages=PAGES)
    driven.executor = native.executor
    assert _greedy(driven, 3) == _greedy(reference, 3)


def test_a_tampered_weight_chunk_fails_the_load(sealed, tmp_path, monkeypatch):
    import shutil

    import helios.core.reader as reader_module
    from helios.core import ChunkDigestMismatch
    from helios.proto import core_pb2
    from tests.core.forge import flip

    monkeypatch.setattr(reader_module, "_PARALLEL_MIN_NBYTES", 0)
    path = tmp_path / "tiny.hcore"
    shutil.copy(sealed[0], path)
    with _open((path, sealed[1])) as core:
        victim = max((r for r in core.resources.values() if r.kind == core_pb2.RESOURCE_KIND_WEIGHT),
                     key=lambda r: r.decoded_nbytes)
        offset = core.placement(victim.id).offset
    flip(path, offset + 9)
    with _open((path, sealed[1]), decoders=3) as core, pytest.raises(ChunkDigestMismatch, match=repr(victim.id)):
        NativeModel.load(core, LoadOptions(device=str(DEVICE), pages=PAGES))


def _forget_compiled_kernels() -> None:
    """Empties every production kernel's in-memory cache, as a fresh process starts (compiled again
    from Triton's disk cache at worst)."""
    import importlib
    import pkgutil

    from triton.runtime.jit import JITFunction

    import helios.production.kernels as kernels

    for info in pkgutil.iter_modules(kernels.__path__):
        for value in vars(importlib.import_module(f"{kernels.__name__}.{info.name}")).values():
            if isinstance(value, JITFunction):
                value.device_caches.clear()


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA device: on a CPU Triton interprets, nothing compiles")
def test_every_kernel_compiles_ahead_of_the_warm_run(cores):
    """The kernels phase compiles every specialization before any plan runs: with Triton's in-memory
    caches emptied, loading compiles each kernel ahead (concurrently) and none at a launch, also
    where an earlier load of this process recorded the load's specializations while it held kernels
    compiled for other loads (discovery hides them: kernel_compile.py)."""
    from triton import knobs

    _forget_compiled_kernels()
    compiles: dict[str, list[str]] = {"ahead": [], "at_launch": []}

    def count(*, is_manual_warmup, **kwargs) -> None:
        compiles["ahead" if is_manual_warmup else "at_launch"].append(kwargs["repr"])  # the specialization

    previous = knobs.runtime.jit_post_compile_hook
    knobs.runtime.jit_post_compile_hook = count
    try:
        NativeModel.load(cores("qwen3"), LoadOptions(device=str(DEVICE), pages=PAGES, linear="torch"))
    finally:
        knobs.runtime.jit_post_compile_hook = previous
    assert compiles["ahead"] and not compiles["at_launch"], compiles["at_launch"]


@pytest.mark.gpu
@pytest.mark.skipif(DEVICE.type != "cuda", reason="needs a CUDA device: on a CPU nothing is compiled or recorded")
def test_a_warm_start_lowers_its_plans_once_and_serves_as_the_cold_one(cores, tmp_path, monkeypatch, caplog):
    """A load records its kernels, product decisions and device memory under its identity; the
    next load of that identity takes them, lowers each plan once (over the final cache), compiles
    nothing at a launch, sizes the same cache and decodes the same greedy tokens."""
    import logging

    from triton import knobs

    from helios.production import kernel_compile, native_model
    from helios.production.lowering.product_choice import forget_measurements

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))  # records of this test alone
    lowered: list[str] = []
    lower = native_model._lower

    def counted(item, *args, **kwargs):
        lowered.append(item.handle.name)
        return lower(item, *args, **kwargs)

    monkeypatch.setattr(native_model, "_lower", counted)
    at_launch: list[str] = []
    monkeypatch.setattr(knobs.runtime, "jit_post_compile_hook",
                        lambda *, is_manual_warmup, **kw: None if is_manual_warmup else at_launch.append(kw["repr"]))
    core = cores("qwen3")
    options = LoadOptions(device=str(DEVICE), host_cache_gib=0.0, startup=StartupOptions(max_concurrency=2))
    runs = []
    for _ in range(2):
        forget_measurements()  # a fresh process's product decisions and kernels: the identity is the same
        _forget_compiled_kernels()
        lowered.clear()
        with caplog.at_level(logging.INFO, logger="helios.production.native_model"):
            caplog.clear()
            native = NativeModel.load(core, options)
        driven = ReferenceEngine.load(core, pages=PAGES)
        driven.executor = native.executor
        runs.append((list(lowered), native.pages, {d.shape: d.path for d in native.linear_decisions},
                     _greedy(driven, 6), caplog.text))
    (cold_lowered, cold_pages, cold_paths, cold_tokens, cold_log), (warm_lowered, *warm, warm_log) = runs
    assert len(cold_lowered) == 2 * len(native.graphs) and sorted(warm_lowered) == sorted(native.graphs)
    assert "lowered once" not in cold_log and "lowered once, over the final cache" in warm_log, warm_log
    assert warm == [cold_pages, cold_paths, cold_tokens]
    assert not at_launch, at_launch
    assert len(list((tmp_path / kernel_compile.LOADS_DIR).iterdir())) == 1


def test_a_cpu_load_after_compiled_kernel_definitions_fails_in_one_line(cores, monkeypatch):
    """Triton fixes interpretation when a kernel is defined: kernels defined without TRITON_INTERPRET
    cannot run on CPU tensors, so a CPU load in such a process says so instead of failing mid-plan."""
    from helios.production import kernels
    from helios.production.loading import load_native_model

    monkeypatch.setattr(kernels, "INTERPRETED", False)
    with pytest.raises(RuntimeError, match="defined without TRITON_INTERPRET=1 in this process"):
        load_native_model(cores("llama"), device="cpu", pages=8)


def test_both_runtimes_export_their_startup_phases_and_what_the_device_made(cores):
    """`helios_startup_seconds{phase}` carries each runtime's load phases in load order; the
    production runtime's capture and compile counters are the process's (nothing on a CPU)."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from helios.production.loading import load_native_model, runtime_for
    from helios.reference.loading import load_runtime as load_reference
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions
    from helios.server.metrics import HeliosCollector, ServerCounters, build_registry

    def scrape(runtime) -> dict[str, list]:
        registry = build_registry(HeliosCollector(runtime.metrics, ServerCounters(), lambda: 0, 1))
        families = text_string_to_metric_families(generate_latest(registry).decode())
        return {f.name: f.samples for f in families}

    core = cores("qwen3")
    options = RuntimeOptions(AdmissionLimits(max_active=2, queue_capacity=2))
    model = load_native_model(core, device=str(DEVICE), pages=PAGES)
    production = scrape(runtime_for(model, options))
    reference = scrape(load_reference(core, options))
    expected = {"production": [p.name for p in model.startup], "reference": ["verify", "weights", "cache", "tuning"]}
    assert expected["production"] == ["verify", "weights", "tuning", "kernels", "cache", "graphs", "host_tier"]
    for runtime, samples in (("production", production), ("reference", reference)):
        phases = [(s.labels["phase"], s.value) for s in samples["helios_startup_seconds"]]
        assert [name for name, _ in phases] == expected[runtime], runtime
        assert all(seconds >= 0 for _, seconds in phases) and sum(seconds for _, seconds in phases) > 0
    assert {p.name: p.seconds for p in model.startup} == {
        s.labels["phase"]: s.value for s in production["helios_startup_seconds"]}
    counters = model.device_counters()
    for name, key in (("helios_graphs_captured", "graphs_captured"), ("helios_kernels_compiled", "kernels_compiled")):
        assert [s.value for s in production[name]] == [counters[key]]  # the process's counts
        assert [s.value for s in reference[name]] == [0]
    assert (counters["graphs_captured"] > 0) == GPU and (counters["kernels_compiled"] > 0) == GPU
