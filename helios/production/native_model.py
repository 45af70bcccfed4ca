"""`NativeModel.load` (device side): a verified core becomes a running production executor.

Startup phases, each timed and reported in `NativeModel.startup`:

  verify   decode and validate the PreparedContract, apply load-time selection (which may reduce the
           captured concurrency), check that every selected graph has its program for the loaded rank, that
           the engine's operations (INITIALIZATION, PREFILL, DECODE) are covered, validate programs
           against the manifest's buffers;
  weights  map the rank's weights from the core onto the device (one copy per resource, no conversion;
           several resources verified and decoded at once: weight_loading.py);
  tuning   run the manifest's required startup tuning producers (helios/runtime/tuning.py, checked
           in verify) into the TUNED buffers, before any serving plan runs: the kernels phase's
           warm-up, capture, cost measurement and every round read the filled buffers (the same
           tensors: no serving plan ever sees a TUNED buffer unfilled);
  kernels  lower every selected program into a launch plan over placeholder buffers (a one-page
           cache), compile every Triton kernel specialization the plans launch, many at once
           (kernel_compile.py: discovered, or read from the record of an earlier load of the same
           identity, `_load_identity`), then run each plan once (a sampling plan also in its sort form
           where its rank stage is chunked), which measures the transient memory the plans need; time
           the product shapes (or take the decisions the same identity recorded); record under the
           identity the transient memory and what the phase left reserved (scratch, samplers,
           workspaces: `kernel_compile.LoadMemory`). A warm start (an earlier load of the identity
           recorded its specializations, product decisions and memory; CUDA graphs on; on a core of
           several ranks, every rank found its records) only compiles the recorded specializations
           (on a thread started at the end of verify, while the weights load: the phase waits for
           it) and gives the policy the recorded decisions, and the cache is sized after the recorded
           memory (the reserve its own lowering has not made yet counted as transient): its plans are
           lowered once, in the graphs phase, and first run by the capture's warm-up (a product shape
           the record lacks is timed there and the plans lowered again; a kernel it lacks compiles at
           that warm-up, inside startup, and the records are forgotten);
  cache    size the physical cache planes from the memory that remains: `gpu_memory_fraction` of the
           device minus what is allocated (weights, static buffers, scratch) minus the measured
           transient need and the host-tier copies' device staging (sized from the tier, at most
           256 MiB); never more pages than max_concurrency full contexts;
  graphs   lower the plans (again, but on a warm start) over the final cache planes (bound to them:
           the placeholder plans are dropped) and capture one CUDA graph per selected (operation,
           capacity) variant (on a CPU the plans stay eager);
  costs    with `measure_costs` (adaptive speculation): time each DECODE and SPECULATIVE graph's
           round, `cost_repeats` replays of its CUDA graph after capture (the median), or one eager
           run on a CPU, over the idle zeroed transport, persistent state and completion records
           restored afterwards as capture restores them; the executor's `round_costs()`;
  host_tier  build the executor over the buffers, with the host tier of evicted checkpoints
           (`host_cache_gib`; on a GPU its pinned allocation runs on a thread from here on and the
           first host-tier copy waits for it: helios/production/host_memory.py), the device staging
           its copies go through; it holds two execution frames when the transport declares two
           (executor.py).
The phases are timed by `helios.runtime.startup.PhaseClock` and exported on /metrics as
`helios_startup_seconds{phase}`; `NativeModel.device_counters()` answers the graphs captured and
kernels compiled in this process (`helios_graphs_captured_total`, `helios_kernels_compiled_total`).

NOTE: the cache is sized before capture because a CUDA graph records buffer addresses; the memory
the graphs hold is what the kernels phase measured (on a warm start, what the identity's earlier
load measured), so "after graphs are loaded" holds in substance.
`NativeModel.manifests` is the resulting execution geometry per rank: the selected graphs and the
manifest's buffers with cache planes at their physical page count.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from helios.contract import PreparedContract, StartupOptions
from helios.core.source import CoreSource
from helios.errors import HeliosError
from helios.production.buffers import ScratchArena, manifest_buffers
from helios.production.capture import GraphCapture, captured_graphs
from helios.production.engram import engram_gatherers
from helios.production.executor import ExecutorGraph, NativeExecutor, copy_staging_pages
from helios.production.gpu_paths import GpuPaths
from helios.production.kernel_compile import (
    CompiledPlans,
    LoadMemory,
    compile_plans,
    compile_recorded,
    compiled_kernels,
    forget_record,
    load_record,
    products_record,
    recorded_load_memory,
    save_load_record,
    source_digest,
    specializations_record,
)
from helios.production.lowering import lower_program
from helios.production.lowering.context import sampler_storage
from helios.production.lowering.product_choice import (
    PATHS,
    Decision,
    LinearPolicy,
    policy_for,
    recorded_decisions,
    save_decisions,
)
from helios.production.plan import LaunchPlan
from helios.production.weight_loading import WeightDeclaration, load_weights
from helios.program.validate import ValidatedOperator, validate_program
from helios.proto import contract_pb2, manifest_pb2, program_pb2
from helios.runtime.costs import RoundCosts, measured_graphs, time_rounds
from helios.runtime.host_cache import host_pages, within_device
from helios.runtime.packing import (
    GraphPacking,
    LaneInput,
    check_history_regions,
    check_page_table_views,
    check_vision,
    continuation_planes,
)
from helios.runtime.startup import PhaseClock, StartupPhase
from helios.runtime.tuning import StartupTuning, TuningRefused

_log = logging.getLogger(__name__)

C, M, P = contract_pb2, manifest_pb2, program_pb2
REQUIRED_OPERATIONS = (C.OPERATION_INITIALIZATION, C.OPERATION_PREFILL, C.OPERATION_DECODE)


class StartupFailed(HeliosError):
    """The core cannot be served on this device; the message names the phase and what is wrong."""


class MissingGraphVariant(StartupFailed):
    """A selected graph has no program, or an operation the engine needs has no selected graph."""


class InsufficientMemory(StartupFailed):
    """The memory left after weights and graphs cannot hold the cache the selection needs."""


@dataclass(frozen=True, slots=True)
class LoadOptions:
    """How to load a core."""

    device: str = "cuda"  # "cuda", "cuda:N" or "cpu"
    startup: StartupOptions = field(default_factory=StartupOptions)  # load-time selection
    gpu_memory_fraction: float = 0.9  # share of the device's memory Helios may hold in all
    pages: int | None = None  # physical cache pages; None: sized from gpu_memory_fraction (CPU: full contexts)
    cuda_graphs: bool = True  # capture and replay CUDA graphs (GPU only; False runs plans eagerly)
    linear: str = "auto"  # small matrix products: "auto" (timed on a GPU, torch on a CPU), "triton", "torch"
    # The GPU's branches at small tiles, and separate staging, on any device (gpu_paths.py); None: off.
    # "auto" products are then Triton.
    gpu_paths: GpuPaths | None = None
    # Time each DECODE and SPECULATIVE graph's round once captured (the adaptive program choice's cost
    # table, `helios.runtime.costs`): `cost_repeats` replays each on a GPU, one eager run on a CPU.
    measure_costs: bool = False
    cost_repeats: int = 5
    # The host tier of evicted checkpoints (helios/runtime/host_cache.py): GiB of host memory, pinned on a
    # GPU; None: sized from the memory available at load (capped); 0: none.
    host_cache_gib: float | None = None
    # The tensor-parallel rank this process loads and its `RankGroup` (production/ranks/group.py): a
    # core of N > 1 ranks loads only with a group of N; rank 0 without one for a one-rank core.
    rank: int = 0
    group: Any = None

    def __post_init__(self) -> None:
        if self.cost_repeats < 1:
            raise StartupFailed(f"cost_repeats must be >= 1, got {self.cost_repeats}")
        if self.gpu_paths is not None and not isinstance(self.gpu_paths, GpuPaths):
            raise StartupFailed(f"gpu_paths must be a GpuPaths or None, got {self.gpu_paths!r}")
        if self.linear not in ("auto", *PATHS):
            raise StartupFailed(f"linear must be 'auto', 'triton' or 'torch', got {self.linear!r}")
        if not 0.0 < self.gpu_memory_fraction <= 1.0:
            raise StartupFailed(f"gpu_memory_fraction must be in (0, 1], got {self.gpu_memory_fraction}")
        if self.pages is not None and self.pages < 1:
            raise StartupFailed(f"pages must be >= 1, got {self.pages}")
        if self.host_cache_gib is not None and not self.host_cache_gib >= 0:
            raise StartupFailed(f"host_cache_gib must be >= 0, got {self.host_cache_gib}")


@dataclass(frozen=True, slots=True)
class _Program:
    handle: manifest_pb2.GraphHandle
    program: program_pb2.Program
    operators: tuple[ValidatedOperator, ...]
    lane_rows: int  # the most rows one request holds in a round of the graph (contract `Graph.lane_rows`)


class NativeModel:
    """A core loaded for production execution of one rank (rank 0 for a one-rank core) on one device."""

    def __init__(self, *, contract: PreparedContract, serving: contract_pb2.ServingContract,
                 manifests: tuple[manifest_pb2.ExecutionManifest, ...], executor: NativeExecutor, pages: int,
                 startup: tuple[StartupPhase, ...], device: torch.device, weight_bytes: int,
                 linear_decisions: tuple[Decision, ...] = (), max_concurrency: int | None = None) -> None:
        self.contract = contract
        self.serving = serving
        self.manifests = manifests  # per rank: the execution geometry as loaded
        self.executor = executor
        self.pages = pages  # physical cache pages of every cache plane
        self.startup = startup
        self.device = device
        self.weight_bytes = weight_bytes
        self.linear_decisions = linear_decisions  # path of each small matrix product shape (product_choice.py)
        self.max_concurrency = max_concurrency  # request slots of the load-time selection
        self.rank_weight_bytes = (weight_bytes,)  # every rank's weight bytes (rank 0 of several: all of them)

    def run_round(self, graph_name: str, lanes: list[LaneInput]):
        """One round of one graph over a cohort, outside a scheduler (executor.py: `run_round`)."""
        return self.executor.run_round(graph_name, lanes)

    @property
    def graphs(self) -> dict[str, ExecutorGraph]:
        return self.executor.graphs

    @staticmethod
    def device_counters() -> dict[str, int]:
        """What this process's device half has made: CUDA graphs captured (`capture.captured_graphs`)
        and Triton kernel specializations compiled (`kernel_compile.compiled_kernels`); both stop
        changing when startup ends."""
        return {"graphs_captured": captured_graphs(), "kernels_compiled": compiled_kernels()}

    # ------------------------------------------------------------------------------------------ load

    @classmethod
    def load(cls, core: CoreSource, options: LoadOptions | None = None) -> NativeModel:
        """Load `core` (an opened core or a PreparedCore: `.contract`, `.manifest`, `.read(id)`)."""
        options = options or LoadOptions()
        device = torch.device(options.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise StartupFailed("device 'cuda' requested but no CUDA device is present; use --device cpu")
        clock = PhaseClock((lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None)
        phase = clock.phase

        with phase("verify"):
            serving, manifest = core.contract, core.manifest
            contract = PreparedContract.decode(serving, manifest)
            selection = contract.select(options.startup)
            programs = _programs(core, manifest, serving, {g.name: g.lane_rows for g in selection.graphs}, options)
            tuning = _tuning(core, serving, manifest, programs)
            slots = selection.max_concurrency
        paths = options.gpu_paths
        policy = policy_for(options.linear, device, deferred=True, gpu_paths=paths is not None)
        # A warm start's recorded kernels compile on a thread while the weights load (Triton's disk
        # cache and module loads beside the weights' reads, decompression and copies); the kernels
        # phase takes them where its identity is the one guessed here (tuning may time products).
        ahead = _RecordedAhead.start(serving, manifest, programs, options, policy, device)
        try:
            with phase("weights"):
                weights = load_weights(core, (decl for program in [*(item.program for item in programs.values()),
                                                                   *(p.programs[options.rank if options.rank < len(p.programs) else 0]
                                                                     for p in tuning.producers)]
                                              for decl in _weight_declarations(program)), device)
                weight_bytes = sum(t.numel() * t.element_size() for t in weights.values())
            arena = ScratchArena(device)
            with phase("tuning"):
                tuned = _run_tuning(tuning, manifest, weights, arena, device, paths, options)
        except BaseException:
            if ahead is not None:  # a failed load leaves no thread compiling behind it
                ahead.abandon()
            raise
        contracts = {g.name: g for g in serving.model.graphs}
        untuned = [b.name for b in manifest.buffers if b.name not in tuned]

        def lower_all(buffers: Mapping[str, torch.Tensor]) -> dict[str, LaunchPlan]:
            return {name: _lower(item, weights, buffers, arena, device, policy, paths, options.group)
                    for name, item in programs.items()}

        with phase("kernels"):
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            reserved = torch.cuda.memory_reserved(device) if device.type == "cuda" else 0
            marks = [time.perf_counter()]
            # what decides the load's kernels and products: the key of their records (None on a CPU,
            # whose interpreter has nothing to compile); the thread compiling ahead is waited for first
            identity = (_load_identity(serving, manifest, programs, options, policy, _platform(device))
                        if device.type == "cuda" else None)
            compiled = ahead.result(identity) if ahead is not None else _NOT_READ
            packings = {name: GraphPacking.resolve(contracts[name], manifest, physical_rows=serving.max_concurrency)
                        for name in programs}
            recorded = _recorded_load(identity, policy, device, compiled) if options.cuda_graphs else None
            if options.group is not None and device.type == "cuda" and not options.group.minimum(int(recorded is not None)):
                recorded = None  # every rank runs the same phases, or the plans' collectives would not meet
            if recorded is not None:  # a warm start: lowered once, in the graphs phase (module docstring)
                # what the cold load's phase left reserved and this one has not (its lowering comes later)
                transient = recorded.memory.transient + max(
                    0, recorded.memory.kept - (torch.cuda.memory_reserved(device) - reserved))
                _log.info("kernels phase: %d specializations and %d product decisions as recorded, compiled "
                          "%.2f s; the plans are lowered once, over the final cache", recorded.compiled.count,
                          recorded.decisions, time.perf_counter() - marks[0])
            else:
                transient = 0
                placeholder = {**manifest_buffers(manifest, device, pages=1, names=untuned), **tuned}
                warm = lower_all(placeholder)
                marks.append(time.perf_counter())
                complete = identity is not None
                if device.type == "cuda":
                    # NOTE: zeroed transport is a valid submission (lane 0 at position 0 on page 0 of the
                    # one-page placeholder cache), so each plan runs in bounds; its kernels are compiled first.
                    compiled = compile_plans(warm.values(), device, extra=policy.pending_runs(), identity=identity)
                    marks.append(time.perf_counter())
                    before = compiled_kernels()
                    for plan in warm.values():  # the sort beside a chunked rank stage: its memory is measured too
                        for form in plan.warm_forms():
                            plan.run(rank_form=form)
                    if compiled.record is not None and compiled_kernels() > before:
                        _log.info("the recorded kernel specializations missed %d the plans launch; the next load "
                                  "discovers them again", compiled_kernels() - before)
                        forget_record(compiled.record)
                        complete = False
                    torch.cuda.synchronize(device)
                    transient = torch.cuda.max_memory_allocated(device) - torch.cuda.memory_allocated(device)
                marks.append(time.perf_counter())
                # Triton or torch for each product shape, its kernels now compiled: as an earlier load of this
                # identity measured them, or timed now (and recorded for the next)
                products = products_record(identity) if identity else None
                adopted = policy.adopt(recorded_decisions(products) or {})
                timed = policy.measure_pending()
                if timed:
                    complete = save_decisions(products, policy.decisions) and complete
                marks.append(time.perf_counter())
                del placeholder, warm
                kernels = specializations_record(identity) if complete else None
                if kernels is not None and kernels.exists() and options.cuda_graphs:  # a later load may lower once
                    save_load_record(load_record(identity), LoadMemory(
                        transient, max(0, torch.cuda.memory_reserved(device) - reserved)))
                steps = ("lowered", "compiled", "warm-up run", "products timed") if len(marks) == 5 else (
                    "lowered", "ran", "products timed")
                _log.info("kernels phase: %s (%d product shapes timed, %d as recorded)", ", ".join(
                    f"{step} {b - a:.2f} s" for step, a, b in zip(steps, marks[:-1], marks[1:], strict=True)),
                    timed, adopted)
        with phase("cache"):
            page_bytes = manifest_page_bytes(manifest)
            host = host_pages(options.host_cache_gib, page_bytes)
            staging = copy_staging_pages(host, page_bytes) * page_bytes  # allocated by the executor below
            pages = _pages(contract, manifest, slots, options, device, transient + staging)
            if options.group is not None:  # every rank's cache holds the same page ids: the smallest
                pages = options.group.minimum(pages)
            # the default tier is also bounded by the device cache it backs; its staging can only
            # shrink, so the cache sized above still fits
            host = within_device(host, options.host_cache_gib, pages)
            buffers = {**manifest_buffers(manifest, device, pages=pages, names=untuned), **tuned}
        with phase("graphs"):
            lowering = time.perf_counter()
            plans = lower_all(buffers)
            if recorded is not None and policy.measure_pending():  # a product shape without its record's
                _log.info("a product shape the load's record lacks was timed; the plans are lowered again")
                save_decisions(products_record(identity), policy.decisions)
                plans = lower_all(buffers)
            lowered = time.perf_counter()
            capture = None
            if device.type == "cuda" and options.cuda_graphs:
                capture = GraphCapture(device)
                persistent = [buffers[b.name] for b in manifest.buffers
                              if b.role in (M.BUFFER_ROLE_STATE, M.BUFFER_ROLE_COMPLETION)]
                sampler_storage(arena).freeze()  # the graphs hold its buffers' addresses
                capture.capture(plans, preserve=persistent)
                _log.info("graphs phase: lowered %.2f s, %d graphs captured in %.2f s", lowered - lowering,
                          len(plans), time.perf_counter() - lowered)
                if recorded is not None and compiled_kernels() > recorded.kernels:
                    _log.info("the recorded kernel specializations missed %d the plans launch; the next load "
                              "discovers them again", compiled_kernels() - recorded.kernels)
                    forget_record(recorded.compiled.record)
                    forget_record(load_record(identity))
            graphs = {name: ExecutorGraph(name, item.handle.operation, item.handle.batch_capacity,
                                          item.handle.packed_token_capacity, plans[name], packings[name])
                      for name, item in programs.items()}
        costs = None
        if options.measure_costs:  # before the executor initializes the transport: zeroed, as capture ran
            with phase("costs"):
                persistent = [buffers[b.name] for b in manifest.buffers
                              if b.role in (M.BUFFER_ROLE_STATE, M.BUFFER_ROLE_COMPLETION)]
                costs = _measure_costs(graphs, contracts, persistent, capture, device,
                                       options.cost_repeats if device.type == "cuda" else 1)
        completion = {slot.field: slot.buffer for slot in manifest.completion.fields}
        # two frames: a round may be submitted before the last completes
        cache_buffers = [b.name for b in manifest.buffers if b.role == M.BUFFER_ROLE_CACHE]
        with phase("host_tier"):
            executor = NativeExecutor(graphs, buffers, completion, frames=min(max(manifest.transport.frames, 1), 2),
                                      device=device, capture=capture, separate_staging=paths is not None,
                                      cache_buffers=cache_buffers, host_pages=host,
                                      continuation_buffers=continuation_planes(serving))
        if serving.model.engram_tables:
            with phase("engram"):  # the tables stay in host memory; the device holds two staging frames each
                executor.engram = engram_gatherers(core, buffers, separate=executor.separate_staging,
                                                   pinned=device.type == "cuda")
        executor.costs = costs
        loaded = manifest_pb2.ExecutionManifest()
        loaded.CopyFrom(manifest)
        del loaded.graphs[:]
        loaded.graphs.extend(item.handle for item in programs.values())
        for b in loaded.buffers:
            if b.role == M.BUFFER_ROLE_CACHE:
                b.shape[0] = pages
        return cls(contract=contract, serving=serving, manifests=(loaded,), executor=executor, pages=pages,
                   startup=tuple(clock.phases), device=device, weight_bytes=weight_bytes,
                   linear_decisions=policy.decisions, max_concurrency=slots)


def _load_identity(serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest,
                   programs: Mapping[str, _Program], options: LoadOptions, policy: LinearPolicy,
                   platform: str) -> str | None:
    """A digest of what decides the Triton specializations this load's plans launch (the key of
    their record, helios/production/kernel_compile.py): the contract, the manifest, each selected
    program and its lane rows, the options the lowering reads, the product decisions the policy
    gives untimed, Helios's source, and `platform` (`_platform`). None where the policy cannot tell
    its untimed answers."""
    known = policy.known()
    if known is None:
        return None

    digest = hashlib.sha256()
    digest.update(serving.SerializeToString(deterministic=True))
    digest.update(manifest.SerializeToString(deterministic=True))
    for name in sorted(programs):
        item = programs[name]
        digest.update(f"{name}:{item.lane_rows}:".encode())
        digest.update(item.program.SerializeToString(deterministic=True))
    group = None if options.group is None else options.group.size
    digest.update(repr((options.linear, options.gpu_paths, options.rank, group, known, source_digest(),
                        platform)).encode())
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class _RecordedLoad:
    """What a warm start takes from the records of an earlier load of its identity."""

    memory: LoadMemory  # the device memory its plans needed beyond their buffers
    compiled: CompiledPlans  # the specializations compiled from its record
    decisions: int  # product decisions recorded (given to the policy before lowering)
    kernels: int  # `compiled_kernels()` once they were compiled: more after capture, the record missed some


class _RecordedAhead:
    """The recorded kernel specializations of the identity a warm start expects, compiled on a thread
    from the end of verify (`compile_recorded`), so they compile while the weights load."""

    def __init__(self, identity: str, device: torch.device) -> None:
        self.identity = identity
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="helios-kernels")
        self._future = self._pool.submit(compile_recorded, identity, device)

    @classmethod
    def start(cls, serving, manifest, programs, options: LoadOptions, policy: LinearPolicy,
              device: torch.device) -> _RecordedAhead | None:
        """Started where a warm start is expected (CUDA graphs on, the identity's load record present);
        None otherwise."""
        if device.type != "cuda" or not options.cuda_graphs:
            return None
        identity = _load_identity(serving, manifest, programs, options, policy, _platform(device))
        if identity is None or recorded_load_memory(load_record(identity)) is None:
            return None
        return cls(identity, device)

    def result(self, identity: str | None) -> CompiledPlans | None | object:
        """What the thread compiled where `identity` is the one it compiled for (None: it found no usable
        record, which `_recorded_load` then does not read again), `_NOT_READ` otherwise. Waits for the
        thread either way; its failure is raised."""
        try:
            compiled = self._future.result()
        finally:
            self._pool.shutdown()
        return compiled if identity == self.identity else _NOT_READ

    def abandon(self) -> None:
        """The load failed before taking the result: waits for the thread, whose outcome nobody reads."""
        self._pool.shutdown(wait=True, cancel_futures=True)


# `_recorded_load`'s compiled specializations where no `_RecordedAhead` read them for the identity
_NOT_READ = object()


def _recorded_load(identity: str | None, policy: LinearPolicy, device: torch.device,
                   compiled: CompiledPlans | None | object = _NOT_READ) -> _RecordedLoad | None:
    """A warm start's records (module docstring): the load record's memory, the kernel
    specializations compiled from theirs (`compiled`: already, by `_RecordedAhead`, None where it found
    them unusable; `_NOT_READ`: compiled here), the product decisions preloaded into `policy`; None
    where any is missing or unusable (the load then measures as a cold one does)."""
    if identity is None:
        return None
    memory = recorded_load_memory(load_record(identity))
    if memory is None:
        return None
    if compiled is _NOT_READ:
        compiled = compile_recorded(identity, device)
    if compiled is None:
        forget_record(load_record(identity))
        return None
    decisions = recorded_decisions(products_record(identity)) or {}
    policy.preload(decisions)
    return _RecordedLoad(memory, compiled, len(decisions), compiled_kernels())


def _platform(device: torch.device) -> str:
    """The Triton and torch versions and the CUDA device's name and architecture."""
    import triton

    return (f"triton {triton.__version__} torch {torch.__version__} {torch.cuda.get_device_name(device)} "
            f"sm {torch.cuda.get_device_capability(device)}")


def _measure_costs(graphs: dict[str, ExecutorGraph], contracts, persistent: list[torch.Tensor],
                   capture: GraphCapture | None, device: torch.device, repeats: int) -> RoundCosts:
    """Time each DECODE and SPECULATIVE graph's round (see the module docstring, phase costs): a
    replay of its CUDA graph (an eager run of its plan without one), fenced, over the zeroed
    transport capture ran it on; persistent state and completion records get their bytes back."""
    saved = [t.clone() for t in persistent]

    def run(name: str) -> None:
        if capture is not None:
            capture.replay(name)
        else:
            graphs[name].plan.run()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    widths = {name: contracts[name].speculative.verify_tokens for name in graphs
              if contracts[name].HasField("speculative")}
    costs = time_rounds(measured_graphs(graphs.values(), widths), run, repeats=repeats)
    for tensor, value in zip(persistent, saved, strict=True):
        tensor.copy_(value)
    return costs


def _programs(core: CoreSource, manifest: manifest_pb2.ExecutionManifest, serving: contract_pb2.ServingContract,
              selected: Mapping[str, int], options: LoadOptions) -> dict[str, _Program]:
    """The selected graphs' programs of this rank, validated (`selected`: each graph's lane rows)."""
    rank, group = options.rank, options.group
    held = 1 if group is None else group.size
    if manifest.ranks != held:
        raise StartupFailed(f"the core has manifest.ranks = {manifest.ranks}, this load holds {held} rank"
                            f"{'s' if held != 1 else ''} (tensor-parallel cores load through production ranks: "
                            "helios.production.ranks)")
    if not 0 <= rank < manifest.ranks or (group is not None and group.rank != rank):
        raise StartupFailed(f"rank {rank} is not a rank of this load ({manifest.ranks} ranks)")
    check_page_table_views(serving)
    check_history_regions(serving, manifest)
    check_vision(serving)
    descriptors = {b.name: b for b in manifest.buffers}
    handles = {h.name: h for h in manifest.graphs}
    out: dict[str, _Program] = {}
    for name in sorted(selected):
        handle = handles.get(name)
        if handle is None or not handle.program_resources:
            raise MissingGraphVariant(f"selected graph {name!r} has no program in the execution catalog")
        resource = handle.program_resources[rank]
        program = program_pb2.Program.FromString(core.read(resource))
        if program.graph != name or program.rank != rank:
            raise MissingGraphVariant(f"program {resource!r} belongs to graph {program.graph!r} rank {program.rank}, "
                                      f"not {name!r} rank {rank}")
        out[name] = _Program(handle, program, tuple(validate_program(program, descriptors)), selected[name])
    for operation in REQUIRED_OPERATIONS:
        if not any(item.handle.operation == operation for item in out.values()):
            raise MissingGraphVariant(f"no selected graph performs {C.Operation.Name(operation)}")
    return out


def _weight_declarations(program: program_pb2.Program) -> Iterator[WeightDeclaration]:
    for decl in program.tensors:
        if decl.role == P.TENSOR_ROLE_WEIGHT:
            yield WeightDeclaration(decl.resource, decl.dtype, tuple(int(e) for e in decl.shape))


def _lower(item: _Program, weights, buffers, arena: ScratchArena, device: torch.device,
           policy: LinearPolicy | None = None, gpu_paths: GpuPaths | None = None, group=None) -> LaunchPlan:
    return lower_program(item.program, item.operators, weights=weights, buffers=buffers, arena=arena, device=device,
                         linear_policy=policy, gpu_paths=gpu_paths, group=group,
                         lanes=item.handle.batch_capacity or None, lane_rows=item.lane_rows)


def manifest_page_bytes(manifest: manifest_pb2.ExecutionManifest) -> int:
    """Bytes of one page of every cache plane of `manifest` (a host-tier page)."""
    from helios.production.buffers import torch_dtype

    total = 0
    for b in manifest.buffers:
        if b.role == M.BUFFER_ROLE_CACHE:
            per_page = 1
            for e in b.shape[1:]:
                per_page *= int(e)
            total += per_page * torch.empty((), dtype=torch_dtype(b.dtype, b.name)).element_size()
    return total


def _pages(contract: PreparedContract, manifest, slots: int, options: LoadOptions, device: torch.device,
           transient: int) -> int:
    page_tokens = contract.cache.page_tokens
    per_context = -(-contract.context_tokens // page_tokens)
    ceiling = slots * per_context
    if options.pages is not None:
        return options.pages
    if device.type != "cuda":
        return ceiling
    page_bytes = manifest_page_bytes(manifest)
    if page_bytes == 0:
        return 1
    free, total = torch.cuda.mem_get_info(device)
    budget = int(total * options.gpu_memory_fraction) - (total - free) - transient
    pages = min(ceiling, budget // page_bytes)
    if pages < per_context:
        raise InsufficientMemory(
            f"cache: {max(budget, 0) / 2**30:.2f} GiB remain within gpu_memory_fraction="
            f"{options.gpu_memory_fraction}, but one {contract.context_tokens}-token context needs "
            f"{per_context * page_bytes / 2**30:.2f} GiB; raise the fraction or lower the concurrency")
    return int(pages)


def _tuning(core: CoreSource, serving, manifest, programs: dict[str, _Program]) -> StartupTuning:
    try:
        return StartupTuning.resolve(serving, manifest, core.read,
                                     {name: (item.program,) for name, item in programs.items()})
    except TuningRefused as error:
        raise StartupFailed(f"tuning: {error}") from None


def _run_tuning(tuning: StartupTuning, manifest, weights, arena, device, gpu_paths: GpuPaths | None = None,
                options: LoadOptions | None = None) -> dict[str, torch.Tensor]:
    """Run each required startup tuning producer once, in catalog order, into fresh TUNED buffers
    (the tensors every serving plan then binds; they only read them). A producer binds nothing but
    weights, its scratch and TUNED buffers (checked by `StartupTuning.resolve`); on a core of several
    ranks each rank runs its own producer program (collectives over its group)."""
    rank = options.rank if options is not None else 0
    group = options.group if options is not None else None
    tuned = manifest_buffers(manifest, device, pages=1, names=tuning.buffers)
    for producer in tuning.producers:
        r = rank if rank < len(producer.programs) else 0
        lower_program(producer.programs[r], producer.operators[r], weights=weights, buffers=tuned, arena=arena,
                      device=device, gpu_paths=gpu_paths, group=group).run()
    return tuned
