"""The GPU-paths mode on a CPU (helios/production/gpu_paths.py): the production lowering and executor
take the GPU's branches at small tiles, in the Triton interpreter, and still produce the reference's
tokens; the forced branches really run; and bugs that live only on those branches (a rotary that
loads positions relative to its program's block, a combine that drops the last context split, a
q/k/v launch with a wrong tile offset, a page-table slice upload that loses an entry) are caught in
this mode and not in the default CPU mode."""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
import torch

from helios.production.gpu_paths import GpuPaths, GpuPathsError
from helios.production.native_model import LoadOptions, NativeModel, StartupFailed
from helios.reference.engine import ReferenceEngine
from helios.runtime.request import GenerationRequest, SamplingParams
from tests.production.helpers import PAGES, PROMPT, mutant_module

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="the mode exists for CPU runs: "
                                "on a GPU the branches run anyway")


@pytest.fixture(autouse=True)
def _quiet_interpreter():
    # the combine pass computes exp(-inf - -inf) for empty splits and masks it: NumPy warns in the interpreter
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")
        yield


class _Recorded:
    """A Triton kernel whose launches (name, grid, constexpr keywords) are appended to `log`."""

    def __init__(self, kernel, name: str, log: list) -> None:
        self.kernel, self.name, self.log = kernel, name, log

    def __getitem__(self, grid):
        launch = self.kernel[grid]

        def run(*args, **kwargs):
            self.log.append((self.name, tuple(grid), {k: v for k, v in kwargs.items() if k.isupper()}))
            return launch(*args, **kwargs)
        return run


def _record_launches(monkeypatch) -> list:
    from helios.production.kernels import attention, linear, norm, rotary, sampling

    log: list = []
    for module, names in ((attention, ("_attention_kernel", "_combine_kernel")),
                          (linear, ("_linear_kernel", "_gated_kernel")), (norm, ("_norm_kernel",)),
                          (rotary, ("_rotary_cache_kernel", "_rotary_pair_kernel")),
                          (sampling, ("_filter_kernel", "_draw_kernel"))):
        for name in names:
            monkeypatch.setattr(module, name, _Recorded(getattr(module, name), name, log))
    return log


def _greedy_request(steps: int) -> GenerationRequest:
    return GenerationRequest(PROMPT, max_tokens=steps, sampling=SamplingParams(temperature=0.0), ignore_eos=True)


# ------------------------------------------------------------------------------------------ the mode


def test_the_switch_is_explicit_and_checked():
    assert LoadOptions().gpu_paths is None  # off by default
    with pytest.raises(StartupFailed, match="GpuPaths"):
        LoadOptions(gpu_paths=True)
    for bad in (dict(attention_splits=1), dict(rows_per_program=3), dict(attention_keys=8), dict(vocab_block=0)):
        with pytest.raises(GpuPathsError):
            GpuPaths(**bad)


def test_small_blocks_tile_every_group_and_step_k():
    """At least two column tiles per group (the last partial where the width is no power of two) and
    at least two K steps of a width dividing K."""
    import triton

    from helios.production.kernels.linear import small_blocks

    for rows, columns, k in [(1, (96, 48, 48), 64), (16, (96,), 96), (3, (288,), 64), (8, (32, 32), 24)]:
        blocks = small_blocks(rows, columns, k)
        assert blocks.block_m >= rows
        assert all(triton.cdiv(n, blocks.block_n) >= 2 for n in columns)
        assert triton.cdiv(k, blocks.block_k) >= 2 or k <= 16
        assert k % blocks.block_k == 0 or k % 16  # a width dividing K wherever a power of two >= 16 does


def test_the_gpu_paths_run_and_the_tokens_equal_the_reference(cores, monkeypatch):
    """The batching engine over the production executor in the mode: its greedy tokens equal the
    reference engine's, and the forced branches ran: Triton products (the q/k/v and gate/up fusions
    among them, a one-row graph's with the norms in their prologue) with several tiles per group,
    norms and rotaries over several programs of several rows, every attention launch split with its
    combine pass, several vocabulary blocks a row, and page-table uploads (whole rows and entry
    slices) copied out of staging of its own."""
    from helios.production.loading import runtime_for
    from helios.runtime.interface import PreparedRequest
    from helios.runtime.limits import AdmissionLimits
    from helios.runtime.options import RuntimeOptions
    from tests.engine.test_batching_runtime import serve

    core = cores("qwen3")
    request = _greedy_request(2)  # 19 prompt tokens: chunks of 16 (4 pages) and 3 (a 5th page), a decode
    expected = list(ReferenceEngine.load(core, pages=PAGES).generate(request))
    paths = GpuPaths()
    log = _record_launches(monkeypatch)
    model = NativeModel.load(core, LoadOptions(device="cpu", pages=PAGES, gpu_paths=paths))
    assert model.linear_decisions and {d.path for d in model.linear_decisions} == {"triton"}
    kernels = model.graphs["decode_b1"].plan.kernels
    # a one-row graph: the layer's norms run in the prologue of the products reading them
    assert "rms_norm+matmul*3" in kernels and "add+rms_norm+matmul*3" in kernels
    assert "add+rms_norm+gate_up+activation" in kernels and "matmul" in kernels
    executor = model.executor
    assert executor.separate_staging
    assert all(executor.staging[name] is not executor.buffers[name] for name in executor.staging)
    assert all(host is not executor.buffers[executor.completion[field]]
               for frame in executor.frame_readback for field, host in frame.items())
    uploads: list[tuple] = []
    upload = executor._upload

    def counted(name, row=None, columns=None):
        uploads.append((name, row, columns))
        upload(name, row, columns)
    executor._upload = counted
    log.clear()  # what ran from here on: the rounds
    runtime = runtime_for(model, RuntimeOptions(AdmissionLimits(max_active=1, queue_capacity=1)))
    (result,) = serve(runtime, [PreparedRequest("r0", request, observe_tokens=True)])
    assert result.tokens == expected

    # the page-table rows went up whole (the new slot) and then entry by entry, out of separate staging
    tables = set(executor._page_tables)
    assert tables and any(name in tables and columns is not None for name, _, columns in uploads)
    assert any(name in tables and row is not None and columns is None for name, row, columns in uploads)
    for name in tables:
        assert torch.equal(executor.buffers[name], executor.staging[name])
    launched: dict[str, list] = {}
    for name, grid, meta in log:
        launched.setdefault(name, []).append((grid, meta))
    attention = launched["_attention_kernel"]
    assert attention and all(meta["SPLITS"] == paths.attention_splits == grid[2] and
                             meta["BLOCK_N"] == paths.attention_keys for grid, meta in attention)
    assert len(launched["_combine_kernel"]) == len(attention)
    pairs = launched["_rotary_pair_kernel"]
    assert all(meta["ROWS"] == paths.rows_per_program for _, meta in pairs)
    assert any(grid[0] > 1 for grid, _ in pairs)  # prefill rows: several programs, each at a row offset
    assert any(grid[0] > 1 and meta["ROWS"] == paths.rows_per_program for grid, meta in launched["_norm_kernel"])
    # one-row products on CUDA cores, prefill chunks' on the tensor-core tile, as 16-bit operands on a GPU
    products = launched["_linear_kernel"] + launched["_gated_kernel"]
    assert {meta["MMA"] for _, meta in products} == {False, True}
    three = [grid for grid, meta in launched["_linear_kernel"] if meta["GROUPS"] == 3]
    assert three and all(grid[0] >= 6 for grid in three)  # q, k and v each in two tiles or more
    assert launched["_gated_kernel"] and all(grid[0] >= 2 for grid, _ in launched["_gated_kernel"])
    assert all(grid[1] >= 2 for grid, _ in launched["_filter_kernel"])  # several vocabulary blocks a row


def test_the_default_cpu_mode_is_unchanged(cores, monkeypatch):
    """Mode off: torch products, staging that is the buffer, one unsplit attention pass (what the
    GPU-paths mode exists to get past), and the same plan as before."""
    log = _record_launches(monkeypatch)
    model = NativeModel.load(cores("qwen3"), LoadOptions(device="cpu", pages=PAGES))
    executor = model.executor
    assert not executor.separate_staging
    assert all(executor.staging[name] is executor.buffers[name] for name in executor.staging)
    assert {d.path for d in model.linear_decisions} == {"torch"}
    assert "matmul*3" not in model.graphs["decode_b1"].plan.kernels
    model.run_round("decode_b1", [_lane(0, (5,))])
    attention = [meta for name, _, meta in log if name == "_attention_kernel"]
    assert attention and all(meta["SPLITS"] == 1 for meta in attention)
    assert not any(name == "_combine_kernel" for name, _, _ in log)


def _lane(slot: int, tokens: tuple[int, ...]):
    from helios.runtime.packing import LaneInput

    return LaneInput(slot=slot, generation=1, consumed=0, tokens=tokens, prompt_tokens_in_round=len(tokens),
                     samples=True, page_ids=tuple(range(8)), seed=5, sampling=SamplingParams(temperature=0.0),
                     output_limit=8, eos_ids=(1,), prompt_token_ids=tokens)


# ------------------------------------------------------------------------------------------ bugs caught

# (kernel module, kernels to replace, the source text, its mutation, the operator case that reaches it)
MUTATIONS = {
    "rotary positions relative to the program's block": (
        "rotary", ("_rotary_cache_kernel", "_rotary_pair_kernel"),
        "positions = tl.load(positions_ptr + r, mask=row_mask, other=0)",
        "positions = tl.load(positions_ptr + (r - first_row), mask=row_mask, other=0)", "rotary/ragged"),
    "the combine drops the last context split": (
        "attention", ("_combine_kernel",),
        "    m = tl.load(part_m_ptr + part)\n",
        "    m = tl.load(part_m_ptr + part, mask=s < SPLITS - 1, other=float(\"-inf\"))\n",
        "paged_attention/split_context/full"),
    "the q/k/v launch's third group at the second group's tile offset": (
        "linear", ("_linear_kernel",),
        "o2, so2, n2, pid - tiles0 - tiles1,", "o2, so2, n2, pid - tiles0,", "matmul*3/decode"),
    "the grouped copies write every block over the first": (
        "copies", ("_copy_fill_kernel",),
        "offsets = block.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)", "offsets = tl.arange(0, BLOCK)",
        "copy+fill*5/completion"),
    "the norm prologue drops the norm weight's offset": (
        "linear", ("_linear_kernel", "_gated_kernel"),
        "scale = tl.load(nw_ptr + ks, mask=k_in, other=0.0).to(tl.float32) + w_offset",
        "scale = tl.load(nw_ptr + ks, mask=k_in, other=0.0).to(tl.float32)",
        "rms_norm+gate_up+activation/silu/one_row"),
}


@pytest.mark.parametrize("bug", list(MUTATIONS))
def test_a_gpu_path_bug_is_caught_in_the_mode_and_not_by_default(bug, monkeypatch, tmp_path):
    """The operators-level case that reaches the mutated branch: a divergence in the GPU-paths mode, a
    pass in the default CPU mode (where the branch never runs)."""
    from conformance.operators import OperatorCases, case_builders, run_operator_case
    from conformance.workload import load_operator_cases
    from helios.production import kernels

    module_name, replaced, old, new, case = MUTATIONS[bug]
    module = importlib.import_module(f"{kernels.__name__}.{module_name}")
    mutant = mutant_module(module, old, new, tmp_path)
    for name in replaced:
        monkeypatch.setattr(module, name, getattr(mutant, name))
    cases = OperatorCases.from_json(load_operator_cases())
    (chosen,) = [c for c in case_builders(cases, gpu_paths=True) if f"{c[0]}/{c[1]}" == case]
    verdicts = {mode: run_operator_case(*chosen, cases, "f32", "cpu", np.random.default_rng(cases.seed),
                                        gpu_paths=mode) for mode in (False, True)}
    assert verdicts[False].verdict == "pass", verdicts[False]
    assert verdicts[True].verdict == "divergence", f"{bug}: not caught in the GPU-paths mode"


def test_a_page_table_slice_upload_bug_is_caught_in_the_mode_and_not_by_default(cores, monkeypatch):
    """An upload of a page-table slice that loses its last entry: invisible where the staging is the
    device buffer (the default CPU mode), a trace divergence naming the page table in the mode (the
    trace reads the transport back from the device buffers)."""
    from conformance.runner import ConformOptions, conform
    from conformance.workload import Workload, WorkloadRequest
    from helios.production.executor import NativeExecutor

    upload = NativeExecutor._upload

    def short_slice(self, name, row=None, columns=None):
        if columns is not None:
            columns = slice(columns.start, columns.stop - 1)  # the slice's last entry never goes up
        upload(self, name, row, columns)
    monkeypatch.setattr(NativeExecutor, "_upload", short_slice)
    # 4 prompt tokens fill the first page; the decode at position 4 adds the second as an entry slice
    body = {"prompt": [3, 1, 4, 1], "max_tokens": 2, "temperature": 0}
    pages = Workload("pages", (WorkloadRequest("r0", body),), max_active=1, queue_capacity=1, pages=PAGES)
    core = cores("qwen3")
    verdicts = {}
    for gpu_paths in (False, True):
        report = conform(core, ConformOptions(levels=("trace",), device="cpu", extra_workloads=(pages,),
                                              gpu_paths=gpu_paths))
        verdicts[gpu_paths] = report.level("trace").divergences
    assert not verdicts[False]
    assert verdicts[True] and "page_table" in verdicts[True][0].field, verdicts[True]


# ------------------------------------------------------------------------------------------ plumbing


def test_conform_gpu_paths_flag_reaches_the_options(monkeypatch, capsys):
    """`helios conform --gpu-paths` sets `ConformOptions.gpu_paths`, which reaches production's load
    and the operators level."""
    import contextlib

    import conformance.runner as runner
    import helios.core
    from conformance.report import Report
    from helios.cli import main

    seen = []
    monkeypatch.setattr(helios.core, "open_core", lambda *args, **kwargs: contextlib.nullcontext(object()))
    monkeypatch.setattr(runner, "conform", lambda core, options: (seen.append(options), Report(()))[1])
    for flags, expected in (([], False), (["--gpu-paths"], True)):
        main(["conform", "model.hcore", "--accept", "acme/tests", "--trust", "key.pub", "--level", "operators",
              *flags])
        assert seen.pop().gpu_paths is expected
    capsys.readouterr()
    assert runner.Production(gpu_paths=True).gpu_paths and not runner.Production().gpu_paths


@pytest.mark.slow
def test_the_operators_level_passes_in_the_mode():
    """Every operator and fusion case in the mode (attention also over a cohort whose contexts cross
    a split; the product fusions on the Triton products) within tolerance."""
    from conformance.operators import FUSIONS, PRODUCT_FUSIONS, OperatorCases, run_operators, split_cohort
    from conformance.workload import load_operator_cases
    from helios.program import OPERATORS

    cases = OperatorCases.from_json(load_operator_cases())
    split = split_cohort(cases, GpuPaths().attention_keys)
    assert split is not None and max(split.history) + 1 > GpuPaths().attention_keys
    level = run_operators(cases, device="cpu", gpu_paths=True)
    names = [case.case for case in level.cases]
    assert {name.split("/")[0] for name in names} == set(OPERATORS) | set(FUSIONS) | set(PRODUCT_FUSIONS)
    assert any(name.startswith("paged_attention/split_context/") for name in names)
    assert not level.divergences, level.divergences


def test_the_norm_prologue_and_stream_cases_lower_to_their_launch_in_the_mode():
    """The conformance cases of the norm-prologue fusions reach the fused launch in the GPU-paths mode
    (one row: the CUDA-core tile), those of the groups past the Triton products' rows their launch on
    streams, and both run unfused on torch by default; the completion writes' case is one copy+fill
    group either way (its kernel runs in the mode, torch calls by default)."""
    from conformance.operators import (
        MOVES,
        NORM_GATE_UP,
        NORM_QKV,
        STREAM_GATE_UP,
        STREAM_QKV,
        OperatorCases,
        OperatorProgram,
        case_builders,
    )
    from conformance.workload import load_operator_cases
    from helios.production.buffers import ScratchArena
    from helios.production.lowering import lower_program
    from helios.program import validate_program
    from helios.program.builder import ProgramBuilder

    cases = OperatorCases.from_json(load_operator_cases())
    chosen = [c for c in case_builders(cases, gpu_paths=True) if c[0] in (NORM_QKV, NORM_GATE_UP)
              and c[1].endswith("one_row") or c[0] in (STREAM_QKV, STREAM_GATE_UP)]
    assert {c[0] for c in chosen} == {NORM_QKV, NORM_GATE_UP, STREAM_QKV, STREAM_GATE_UP}
    moves = [c for c in case_builders(cases, gpu_paths=True) if c[0] == MOVES]
    for operator, _, cohort, build in chosen + moves:
        p = OperatorProgram("f32", ProgramBuilder("case"))
        build(p, np.random.default_rng(0), cohort, cases.geometry, cases)
        program = p.builder.build()
        buffers = {k: torch.from_numpy(v.copy()) for k, v in p.values.items()}
        kernels = {mode: lower_program(program, validate_program(program), weights={}, buffers=buffers,
                                       arena=ScratchArena(torch.device("cpu")), device=torch.device("cpu"),
                                       gpu_paths=GpuPaths() if mode else None).kernels for mode in (False, True)}
        if operator == MOVES:
            assert kernels[True] == kernels[False] == (MOVES,)
            continue
        assert operator in kernels[True], (operator, kernels[True])
        assert not any(k.startswith(("add+rms_norm+", "rms_norm+", "streams:")) for k in kernels[False]), \
            kernels[False]
