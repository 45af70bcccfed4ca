"""The runner (host side; production pieces are imported only when a level needs them): `conform`.

    report = conform(core, levels=("operators", "trace", "e2e"), device="cpu")
    print(report.table()); sys.exit(report.exit_code)

For each workload the production runtime runs once, recording every submission (`TraceRecorder`);
the trace level audits that trace on the reference (`audit.py`), the e2e level runs the same workload
through the reference runtime and compares per request (`e2e.py`). The operators level needs no
workload (`operators.py`). On a machine without CUDA the production kernels run in the Triton
interpreter: `TRITON_INTERPRET=1` is set before the kernels are first imported.

`Production` builds production's runtime for a workload; tests wrap it (or monkeypatch the
production modules) to inject bugs and check that conformance names them.

Workloads: a JSON file (`ConformOptions.workloads`) or objects (`extra_workloads`); without either,
the ones `generate.py` derives from the core's geometry. Every workload run also feeds the coverage
table (`coverage.py`), required by default for the generated workloads only (`require_coverage`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conformance.audit import audit_trace, core_dtype
from conformance.coverage import Observed
from conformance.e2e import (
    DEFAULT_TIMEOUT_S,
    compare_workload,
    drive_copy,
    prepare_workload,
    reference_runtime,
    reference_tie_check,
)
from conformance.generate import Geometry, generated_workloads
from conformance.report import LEVELS, CaseResult, LevelResult, Report
from conformance.resources import account, resource_cases
from conformance.tolerance import tolerance
from conformance.trace import TraceHeader, TraceList, TraceWriter, header_for, read_trace, recorder_for
from conformance.tuning import tuned_buffer_cases
from conformance.workload import (
    OPERATOR_CASES,
    InvalidWorkload,
    Workload,
    load_operator_cases,
    load_workloads,
)
from helios.core.source import CoreSource
from helios.errors import HeliosError
from helios.runtime.limits import AdmissionLimits
from helios.runtime.options import RuntimeOptions


class ConformanceSetupError(HeliosError):
    """Conformance cannot start: an unknown level, no device, or an unusable option."""


def select_device(device: str | None) -> str:
    """"cuda" when available (or asked for), else "cpu" with the Triton interpreter switched on."""
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConformanceSetupError("--device cuda: no CUDA device is present; use --device cpu")
    if device == "cpu":
        # NOTE: must precede the first import of helios.production.kernels (the @triton.jit decorators).
        os.environ.setdefault("TRITON_INTERPRET", "1")
    return device


@dataclass(frozen=True, slots=True)
class Production:
    """How production runs a workload: NativeModel on `device`, the batching engine over it, traced."""

    device: str = "cpu"
    gpu_paths: bool = False  # the GPU-paths mode (helios/production/gpu_paths.py): the GPU's branches forced
    history_drafting: bool = False  # speculative rounds also carry proposals copied from request histories
    # adaptive speculation (`--speculative-width auto`): the load measures round costs and the scheduler
    # chooses each cohort's program from them; the trace audit checks whichever rounds it chose
    adaptive_speculation: bool = False
    # A core of several tensor-parallel ranks: where rank 0's peers come from (`RankOptions`: THREADS
    # spawns them with its `open_core`); each workload runs on production ranks, rank 0 traced.
    ranks: Any = None

    def runtime(self, core: CoreSource, workload: Workload, sink: Any) -> tuple[Any, TraceHeader]:
        from helios.contract import StartupOptions
        from helios.production.gpu_paths import GpuPaths
        from helios.production.native_model import LoadOptions, NativeModel

        if core.manifest.ranks > 1:
            return self._ranks(core, workload, sink)
        model = NativeModel.load(core, LoadOptions(device=self.device, pages=workload.pages,
                                                   host_cache_gib=host_cache_gib(core, workload.host_pages),
                                                   gpu_paths=GpuPaths() if self.gpu_paths else None,
                                                   startup=StartupOptions(history_drafting=self.history_drafting),
                                                   measure_costs=self.adaptive_speculation))
        limits = AdmissionLimits(max_active=min(workload.max_active, model.contract.max_concurrency),
                                 queue_capacity=max(workload.queue_capacity, len(workload.requests)))
        return (traced_runtime(core, model, limits, sink, history_drafting=self.history_drafting,
                               adaptive_speculation=self.adaptive_speculation),
                header_for(core.contract, model.pages))

    def _ranks(self, core: CoreSource, workload: Workload, sink: Any) -> tuple[Any, TraceHeader]:
        from helios.production.ranks.rank_zero import load_rank_zero

        if self.ranks is None or self.gpu_paths:
            raise ConformanceSetupError(f"a core of {core.manifest.ranks} ranks conforms through production ranks: "
                                        "give Production its RankOptions (helios conform does)"
                                        + ("; --gpu-paths is not built for ranks" if self.gpu_paths else ""))
        limits = AdmissionLimits(max_active=min(workload.max_active, core.contract.max_concurrency),
                                 queue_capacity=max(workload.queue_capacity, len(workload.requests)))
        model = load_rank_zero(core, self.ranks, device=self.device, max_concurrency=None, pages=workload.pages,
                               speculative_width=None, history_drafting=self.history_drafting,
                               measure_costs=self.adaptive_speculation)
        return (traced_runtime(core, model, limits, sink, history_drafting=self.history_drafting,
                               adaptive_speculation=self.adaptive_speculation),
                header_for(core.contract, model.pages))


def host_cache_gib(core: CoreSource, host_pages: int | None) -> float | None:
    """The `host_cache_gib` of a host tier of `host_pages` pages of `core` (None: the default size)."""
    if host_pages is None:
        return None
    from helios.production.native_model import manifest_page_bytes
    from helios.runtime.host_cache import GIB

    return host_pages * manifest_page_bytes(core.manifest) / GIB


def traced_runtime(core: CoreSource, model: Any, limits: AdmissionLimits, sink: Any, *,
                   history_drafting: bool = False, adaptive_speculation: bool = False) -> Any:
    """The production runtime over a loaded NativeModel whose every submission goes to `sink`."""
    from helios.production.loading import runtime_for

    def wrap(executor: Any, pages: int) -> Any:
        return recorder_for(executor, core.contract, core.manifest, sink)

    return runtime_for(model, RuntimeOptions(limits, wrap_executor=wrap, history_drafting=history_drafting,
                                             adaptive_speculation=adaptive_speculation))


@dataclass(frozen=True, slots=True)
class ConformOptions:
    levels: tuple[str, ...] = LEVELS
    device: str | None = None  # None: cuda when present, else cpu (Triton interpreter)
    workloads: Path | None = None  # a workloads JSON file; None: the workloads generated from the core
    workload_names: tuple[str, ...] = ()  # () every workload (of the file, or generated)
    operator_cases: Path = OPERATOR_CASES
    operators: tuple[str, ...] = ()  # () every operator
    dtypes: tuple[str, ...] = ()  # operator-level dtypes; () f32 on a CPU, f32 and bf16 on a GPU
    trace_dir: Path | None = None  # also write each workload's trace to DIR/NAME.trace
    timeout_s: float = DEFAULT_TIMEOUT_S
    production: Any = None  # anything with `runtime(core, workload, sink)`; None: Production(device)
    extra_workloads: tuple[Workload, ...] = field(default=())  # workloads given as objects (tests)
    require_coverage: bool | None = None  # a missing mechanism makes the run incomplete; None: generated only
    gpu_paths: bool = False  # production (operators level and Production) in the GPU-paths mode
    history_drafting: bool = False  # both runtimes' speculative rounds carry copied proposals (--history-drafting)
    ranks: Any = None  # a tensor-parallel core: production ranks' RankOptions (Production.ranks)
    # progress(what, done, total): ("operator cases", ...) before the first case and after each,
    # ("workloads", ...) before the first workload and after each; None reports nothing
    progress: Callable[[str, int, int], None] | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.levels) - set(LEVELS))
        if unknown or not self.levels:
            raise ConformanceSetupError(f"--level: unknown {unknown}; choose from {', '.join(LEVELS)} or all")


def _workloads(options: ConformOptions, core: CoreSource, geometry: Geometry) -> tuple[tuple[Workload, ...], bool]:
    """The workloads to run and whether they are the generated ones."""
    if options.extra_workloads:
        return options.extra_workloads, False
    if options.workloads is not None:
        return load_workloads(options.workloads, options.workload_names or None), False
    workloads = generated_workloads(core, geometry)
    if options.workload_names:
        unknown = sorted(set(options.workload_names) - {w.name for w in workloads})
        if unknown:
            raise InvalidWorkload(f"no generated workload named {unknown}; there are {[w.name for w in workloads]}")
        workloads = tuple(w for w in workloads if w.name in options.workload_names)
    return workloads, True


def conform(core: CoreSource, options: ConformOptions | None = None) -> Report:
    """Run the selected levels on `core` (anything with `.contract`, `.manifest`, `.read(id)`)."""
    options = options or ConformOptions()
    levels = [level for level in LEVELS if level in options.levels]
    device = select_device(options.device)
    production = options.production or Production(device, gpu_paths=options.gpu_paths,
                                                  history_drafting=options.history_drafting, ranks=options.ranks)
    results: list[LevelResult] = []
    progress = options.progress or (lambda what, done, total: None)
    if "operators" in levels:
        from conformance.operators import OperatorCases, run_operators

        dtypes = options.dtypes or (("f32",) if device == "cpu" else ("f32", "bf16"))
        cases = OperatorCases.from_json(load_operator_cases(options.operator_cases))
        results.append(run_operators(cases, device=device, dtypes=dtypes, only=options.operators or None,
                                     gpu_paths=options.gpu_paths,
                                     progress=functools.partial(progress, "operator cases")))
    coverage = None
    if "trace" in levels or "e2e" in levels:
        dtype = core_dtype(core.manifest)
        geometry = Geometry.of(core)
        workloads, generated = _workloads(options, core, geometry)
        observed = Observed(window=geometry.window_tokens)
        trace_cases: list[CaseResult] = []
        e2e_cases: list[CaseResult] = []
        tie_check = reference_tie_check(core, dtype) if "e2e" in levels else None
        progress("workloads", 0, len(workloads))
        for done, workload in enumerate(workloads, 1):
            copies = prepare_workload(core, workload, copies=2 if "e2e" in levels else 1)
            sink = TraceList()
            runtime, header = production.runtime(core, workload, sink)
            produced = drive_copy(runtime, copies[0], timeout_s=options.timeout_s)
            counters = getattr(getattr(runtime, "scheduler", None), "counters", None)
            if options.trace_dir is not None:
                write_trace(Path(options.trace_dir) / f"{workload.name}.trace", header, sink.records)
            if "trace" in levels:
                case = audit_trace(core, header, sink.records, case=workload.name, dtype=dtype)
                trace_cases.append(case)
                audited = None if case.divergence is None else max(0, (case.divergence.round or 1) - 1)
                observed.trace(sink.records, audited, counters)
            if "e2e" in levels:
                reference = reference_runtime(core, workload, history_drafting=options.history_drafting)
                referenced = drive_copy(reference, copies[1], timeout_s=options.timeout_s)
                generations = [request.generation for request in copies[0].requests]
                cases = compare_workload(workload, generations, referenced, produced, tie_check,
                                         tolerance(dtype).tie)
                e2e_cases.extend(cases)
                observed.e2e(workload, copies[0].requests, produced, [c.verdict for c in cases], sink.records,
                             counters)
            # Resources (resources.py): every page, slot, round and frame is back once a runtime is driven.
            leaked = resource_cases(account(runtime, f"{workload.name}/resources/production"))
            (trace_cases if "trace" in levels else e2e_cases).extend(leaked)
            if "e2e" in levels:
                e2e_cases.extend(resource_cases(account(reference, f"{workload.name}/resources/reference")))
            progress("workloads", done, len(workloads))
        if "trace" in levels:
            # startup tuning (conformance/tuning.py): both runtimes' TUNED buffers after load
            trace_cases.extend(tuned_buffer_cases(core, device=device, dtype=dtype, gpu_paths=options.gpu_paths))
            results.append(LevelResult("trace", tuple(trace_cases)))
        if "e2e" in levels:
            results.append(LevelResult("e2e", tuple(e2e_cases)))
        required = generated if options.require_coverage is None else options.require_coverage
        coverage = observed.coverage(levels, geometry.unsupported(history_drafting=options.history_drafting),
                                        geometry.eos_ids, required=required)
    return Report(tuple(results), coverage)


def write_trace(path: Path, header: TraceHeader, records: Sequence[Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = TraceWriter(path)
    try:
        writer.header(header)
        for record in records:
            writer.round(record)
    finally:
        writer.close()


def audit_file(core: CoreSource, path: str | Path) -> Report:
    """Audit a recorded trace file (e.g. from a serving run) on the reference: one trace case."""
    header, records = read_trace(path)
    case = audit_trace(core, header, records, case=Path(path).name)
    return Report((LevelResult("trace", (case,)),))
