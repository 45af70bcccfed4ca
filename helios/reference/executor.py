"""The reference executor (host side, NumPy only): round plans over a core's programs, interpreted.

    executor = ReferenceExecutor.load(core, pages=16)
    executor.submit(plan)                  # pack, run the program (now: the reference is synchronous)
    rows = executor.collect(plan)          # that round's completion rows, as read (unvalidated)

It implements the executor seam of `helios.runtime.rounds`, so the batching engine, the sequential
reference engine (engine.py) and the trace audit drive it like the production executor. A round is
the plainest reading of the contract: pack every value binding of the graph from the lanes with the
shared packer (`helios.runtime.packing`), write the transport-owned completion fields (frame index,
the plan's submission sequence), execute the program with the reference interpreter, read the
completion record. The plan's page-table updates are applied to the executor's own record of each
slot's row and checked against the lane's page ids (`PageTableMismatch`): the reference packs the
whole row from the lane, and a delta that would leave the device holding another row is an error
here rather than a silent difference.

Buffers are plain arrays, one per manifest buffer; cache planes get `pages` pages. `load` runs the
manifest's required startup tuning producers (helios.runtime.tuning) into the TUNED arrays before
any serving graph can run; `tuned` names the buffers they filled. With `host_pages`
the host tier is one plain array per cache plane and rank (`host`, `host_pages` pages each, zeroed
lazily by the allocator); a plan's `page_copies` are applied first, in order (helios/engine/host_tier.py). `keep` names
program tensors (e.g. "logits") copied into `kept` after every round (conformance reads the draws).

Tensor-parallel ranks. A core of N > 1 ranks runs in this one process: every rank has its own
STATE, CACHE and COMPLETION arrays (each rank's cache planes hold its own key/value heads) and
reads the one set of TRANSPORT arrays the round packed (programs never write transport). The
ranks' programs of a graph run in lockstep (`execute_ranks`), every collective computed from all
ranks' inputs: the executable specification of the collectives. Every rank writes its own
completion record; a record that differs from rank 0's fails the round (`RankDisagreement`), and
rank 0's is the round's rows. `buffers` is rank 0's; `rank_buffers[r]` rank r's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from helios.core.source import CoreSource
from helios.errors import HeliosError
from helios.program.validate import ValidatedOperator, validate_program
from helios.proto import contract_pb2, manifest_pb2, program_pb2
from helios.reference.collectives import RANK_COLLECTIVES
from helios.reference.interpreter import bf16_to_f32, check_lockstep, execute, execute_ranks
from helios.reference.operators import NUMPY_DTYPES
from helios.runtime.completion import CompletionRows, read_completion, transport_sequence
from helios.runtime.costs import RoundCosts, measured_graphs, time_rounds
from helios.runtime.engram import EngramGatherer, gatherers_for, load_engram_tables
from helios.runtime.lanes import LaneInput
from helios.runtime.packing import (
    GraphPacking,
    check_history_regions,
    check_page_table_views,
    check_vision,
    continuation_planes,
)
from helios.runtime.request import SamplingParams
from helios.runtime.rounds import RoundPlan
from helios.runtime.scores import read_prompt_scores
from helios.runtime.startup import PhaseClock, StartupPhase
from helios.runtime.tuning import StartupTuning

C, M = contract_pb2, manifest_pb2

__all__ = ["EngineLoadError", "LoadedGraph", "PageTableMismatch", "RankDisagreement", "ReferenceExecutor"]


class EngineLoadError(HeliosError):
    """The core cannot be executed by the reference runtime (a missing graph, program or weight)."""


class PageTableMismatch(HeliosError):
    """A plan's page-table updates do not produce the page ids its lane carries (a scheduler fault)."""


class RankDisagreement(HeliosError):
    """A rank's completion record differs from rank 0's: the ranks did not compute the same round."""


class FrameBusy(HeliosError):
    """A plan was submitted into an occupied frame, or collected without being submitted."""


@dataclass(frozen=True, slots=True)
class LoadedGraph:
    name: str
    operation: int
    batch_capacity: int
    packed_token_capacity: int
    program: program_pb2.Program  # rank 0's
    operators: tuple[ValidatedOperator, ...]  # rank 0's, validated
    packing: GraphPacking
    page_table: bool  # binds a PAGE_TABLE source by physical request row (updated by the plan)
    rank_programs: tuple[program_pb2.Program, ...] = ()  # every rank's program, rank 0 first
    rank_operators: tuple[tuple[ValidatedOperator, ...], ...] = ()  # every rank's validated operators
    width: int = 1  # W of a SPECULATIVE graph (target rows a lane); 1 otherwise
    lane_limit: int = 1  # a SPECULATIVE graph's lane limit min(D + 1, W); 1 otherwise
    page_tokens: int = 1  # the core's CacheContract.page_tokens


class ReferenceExecutor:
    """Runs round plans with NumPy; see the module docstring."""

    def __init__(self, graphs: Mapping[str, LoadedGraph], weights: Mapping[str, np.ndarray],
                 buffers: dict[str, np.ndarray], completion: Mapping[int, str], *, pages: int,
                 keep: Sequence[str] = (), frames: int = 1,
                 rank_buffers: Sequence[dict[str, np.ndarray]] = (), cache_buffers: Sequence[str] = (),
                 host_pages: int = 0, continuation_buffers: Mapping[str, str] | None = None) -> None:
        if frames not in (1, 2):
            raise ValueError(f"an executor holds 1 or 2 frames, got {frames}")
        self.graphs = dict(graphs)
        self.weights = weights
        self.buffers = buffers
        # every rank's arrays, rank 0's (`buffers`) first; the TRANSPORT arrays are shared
        self.rank_buffers: list[dict[str, np.ndarray]] = [buffers, *rank_buffers[1:]]
        self.completion = dict(completion)  # CompletionField -> buffer name
        self.pages = pages
        self.keep = tuple(keep)
        self.kept: list[dict[str, np.ndarray]] = []  # per round: copies of the `keep` tensors
        self.kept_graphs: list[str] = []  # the graph of each kept round
        self.frames = frames
        self.sequence = 0  # the last submitted plan's sequence
        self._rows: list[tuple[RoundPlan, CompletionRows] | None] = [None] * frames  # frame -> its round
        self._page_rows: dict[int, tuple[int, ...]] = {}  # slot -> the page-table row the updates built
        self._costs: RoundCosts | None = None  # measured on first asking (`round_costs`)
        self.tuned: tuple[str, ...] = ()  # the TUNED buffers the startup producers filled (`load`)
        self.startup: tuple[StartupPhase, ...] = ()  # the load's phases: verify, weights, cache, tuning (`load`)
        # Engram tables (docs/engram.md): each table's gatherer over its two staging frames (`load`)
        self.engram: tuple[EngramGatherer, ...] = ()
        # The host tier: per rank, cache plane -> [host_pages, ...one page...] (np.zeros: calloc'd, so
        # pages never written take no memory).
        self.cache_buffers = tuple(cache_buffers)
        self.continuation_buffers = dict(continuation_buffers or {})  # cache plane -> its continuation plane
        self.host_pages = host_pages
        self.host: list[dict[str, np.ndarray]] = [
            {name: np.zeros((host_pages, *buffers[name].shape[1:]), dtype=buffers[name].dtype)
             for name in self.cache_buffers} for buffers in self.rank_buffers] if host_pages else []

    @classmethod
    def load(cls, core: CoreSource, *, pages: int, keep: Sequence[str] = (), frames: int = 1,
             host_pages: int = 0) -> ReferenceExecutor:
        """Load `core`'s programs and weights; cache planes get `pages` pages, the host tier
        `host_pages` (0: none)."""
        serving, manifest = core.contract, core.manifest
        clock = PhaseClock()
        with clock.phase("verify"):
            ranks = manifest.ranks
            if ranks < 1:
                raise EngineLoadError(f"the core declares {ranks} ranks")
            check_page_table_views(serving)
            check_history_regions(serving, manifest)
            check_vision(serving)
            if pages < 1:
                raise EngineLoadError(f"pages must be >= 1, got {pages}")
            graphs = _graphs(core, serving, manifest, ranks)
            tuning = StartupTuning.resolve(serving, manifest, core.read,
                                           {name: graph.rank_programs for name, graph in graphs.items()})
        with clock.phase("weights"):
            weights: dict[str, np.ndarray] = {}
            programs = [p for graph in graphs.values() for p in graph.rank_programs]
            programs += [p for producer in tuning.producers for p in producer.programs]
            for program in programs:
                for decl in program.tensors:
                    if decl.role == program_pb2.TENSOR_ROLE_WEIGHT and decl.resource not in weights:
                        weights[decl.resource] = _load_weight(core, decl)
        with clock.phase("cache"):
            rank_buffers: list[dict[str, np.ndarray]] = []
            for _ in range(ranks):
                buffers = {}
                for b in manifest.buffers:
                    if rank_buffers and b.role == M.BUFFER_ROLE_TRANSPORT:
                        buffers[b.name] = rank_buffers[0][b.name]  # one transport, read by every rank
                        continue
                    shape = [int(e) for e in b.shape]
                    if b.role == M.BUFFER_ROLE_CACHE:
                        shape[0] = pages
                    buffers[b.name] = np.zeros(shape, dtype=NUMPY_DTYPES[b.dtype])
                for graph in graphs.values():
                    graph.packing.initialize(buffers)
                rank_buffers.append(buffers)
        # Startup tuning (helios.runtime.tuning): every required producer fills its TUNED buffers on
        # every rank before any serving graph runs; serving programs only read them.
        with clock.phase("tuning"):
            for producer in tuning.producers:
                if ranks == 1:
                    execute(producer.programs[0], {**rank_buffers[0], **weights}, producer.operators[0])
                else:
                    execute_ranks(producer.programs, [{**buffers, **weights} for buffers in rank_buffers],
                                  producer.operators)
        completion = {slot.field: slot.buffer for slot in manifest.completion.fields}
        cache_buffers = [b.name for b in manifest.buffers if b.role == M.BUFFER_ROLE_CACHE]
        executor = cls(graphs, weights, rank_buffers[0], completion, pages=pages, keep=keep, frames=frames,
                       rank_buffers=rank_buffers, cache_buffers=cache_buffers, host_pages=host_pages,
                       continuation_buffers=continuation_planes(serving))
        executor.tuned = tuning.buffers
        executor.startup = tuple(clock.phases)
        # Engram tables stay in host memory; each round of a consuming graph stages the rows it
        # addresses into a frame of the table's TRANSPORT staging buffer (shared by every rank).
        executor.engram = tuple(
            EngramGatherer(table, values, rank_buffers[0][table.staging], rank_buffers[0][table.row_index],
                           ranks=ranks)
            for table, values in load_engram_tables(serving, manifest, core.read, raw_bf16=False))
        return executor

    @property
    def page_bytes(self) -> int:
        """Bytes of one page of every cache plane of every rank, as held here (a host-tier page)."""
        return sum(buffers[name][0].nbytes for buffers in self.rank_buffers for name in self.cache_buffers)

    # ------------------------------------------------------------------------------------------ rounds

    def submit(self, plan: RoundPlan) -> None:
        """Run `plan` now (see the module docstring); its rows wait in its frame for `collect`."""
        self._copy_pages(plan)  # first: what the engine decided is done whatever this round does
        if plan.frame not in range(self.frames) or self._rows[plan.frame] is not None:
            raise FrameBusy(f"graph {plan.graph}: frame {plan.frame} is outside the executor's {self.frames} "
                            "frames or holds an uncollected round")
        graph = self.graphs.get(plan.graph)
        if graph is None:
            raise EngineLoadError(f"graph {plan.graph!r} is not loaded (loaded: {sorted(self.graphs)})")
        self.sequence = plan.sequence
        self._apply_updates(plan, check=graph.page_table)
        graph.packing.pack(plan.lanes, self.buffers)
        staged = gatherers_for(self.engram, plan.graph)
        try:
            for gatherer in staged:
                gatherer.fill(plan.sequence, plan.lanes)  # EngramFrameBusy while both frames are held
            self._run(plan, graph)
        except BaseException:
            for gatherer in staged:  # the round never ran to its completion: nothing consumes its frame
                gatherer.retire(plan.sequence)
            raise

    def _run(self, plan: RoundPlan, graph: LoadedGraph) -> None:
        """Write the transport-owned fields, execute the round's programs and hold its rows."""
        # NOTE: the transport owns frame index and submission sequence: it writes them, programs never do.
        for buffers in self.rank_buffers:
            buffers[self.completion[M.COMPLETION_FIELD_FRAME_INDEX]][...] = plan.frame
            buffers[self.completion[M.COMPLETION_FIELD_SUBMISSION_SEQUENCE]][...] = transport_sequence(plan.sequence)
        if len(self.rank_buffers) == 1:
            env = execute(graph.program, {**self.buffers, **self.weights}, graph.operators)
        else:
            env = execute_ranks(graph.rank_programs, [{**buffers, **self.weights} for buffers in self.rank_buffers],
                                graph.rank_operators)[0]
            self._check_agreement(plan)
        if self.keep:
            self.kept.append({name: np.array(env[name]) for name in self.keep if name in env})
            self.kept_graphs.append(plan.graph)
        arrays = {field: np.array(self._field(field)) for field in self.completion}  # a copy: the frame's own
        rows = read_completion(arrays, [lane.slot for lane in plan.lanes], len(plan.lanes),
                               speculative=plan.operation == C.OPERATION_SPECULATIVE)
        if plan.operation == C.OPERATION_SCORED_PREFILL:
            rows.scores = read_prompt_scores(arrays, sum(len(lane.tokens) for lane in plan.lanes))
        self._rows[plan.frame] = (plan, rows)

    def collect(self, plan: RoundPlan) -> CompletionRows:
        """The rows `submit` read for `plan` (unvalidated: the caller validates)."""
        held = self._rows[plan.frame] if plan.frame in range(self.frames) else None
        if held is None or held[0] is not plan:
            raise FrameBusy(f"graph {plan.graph}: round {plan.sequence} was not submitted in frame {plan.frame}")
        self._rows[plan.frame] = None
        for gatherer in self.engram:  # every rank ran the round in lockstep: each retires its consumer
            for rank in range(len(self.rank_buffers)):
                gatherer.retire(plan.sequence, rank)
        return held[1]

    def round_costs(self, graphs: Sequence[str] | None = None, *, repeats: int = 2) -> RoundCosts:
        """The measured round cost of every DECODE and SPECULATIVE graph (`helios.runtime.costs`;
        `graphs`: of those named only), each measured once, on first asking: `repeats` interpreted
        rounds, the median. The reference interprets every lane a round holds, so each is timed over
        a full lane set (lane i in slot i, one token at position 0, a speculative lane at its lane
        limit), packed into a copy of the buffers: the executor's own state is not touched."""
        widths = {g.name: g.width for g in self.graphs.values()}
        wanted = measured_graphs([g for g in self.graphs.values() if graphs is None or g.name in graphs], widths)
        held = self._costs.by_graph() if self._costs is not None else {}
        missing = [g for g in wanted if g.name not in held]
        if missing:
            copies: list[dict[str, np.ndarray]] = []
            for buffers in self.rank_buffers:  # the TRANSPORT arrays stay shared among the ranks' copies
                copies.append({name: copies[0][name] if copies and array is self.buffers[name] else array.copy()
                               for name, array in buffers.items()})

            def run(name: str) -> None:
                graph = self.graphs[name]
                graph.packing.pack(_idle_lanes(graph, self.pages), copies[0])
                if len(copies) == 1:
                    execute(graph.program, {**copies[0], **self.weights}, graph.operators)
                else:
                    execute_ranks(graph.rank_programs, [{**c, **self.weights} for c in copies], graph.rank_operators)

            measured = time_rounds(missing, run, repeats=repeats)
            kept = self._costs.entries if self._costs is not None else ()
            self._costs = RoundCosts(kept + measured.entries, measured_at=measured.measured_at, repeats=repeats)
        if self._costs is None:  # nothing to measure: the executor has no DECODE or SPECULATIVE graph
            return RoundCosts()
        names = {g.name for g in wanted}
        return RoundCosts(tuple(e for e in self._costs.entries if e.graph in names),
                          measured_at=self._costs.measured_at, repeats=self._costs.repeats)

    def _field(self, field: int) -> np.ndarray:
        return self.buffers[self.completion[field]]

    def _check_agreement(self, plan: RoundPlan) -> None:
        """Every rank's completion record equals rank 0's (the ranks sample the same tokens from the
        same gathered logits, so anything else is a fault of the programs)."""
        for rank, buffers in enumerate(self.rank_buffers[1:], start=1):
            for field, name in self.completion.items():
                if not np.array_equal(buffers[name], self.buffers[name]):
                    raise RankDisagreement(f"graph {plan.graph}, round {plan.sequence}: rank {rank}'s completion "
                                           f"field {M.CompletionField.Name(field)} differs from rank 0's")

    def _copy_pages(self, plan: RoundPlan) -> None:
        """The plan's host-tier copies, in order: every cache plane of every rank, one page each."""
        for copy in plan.page_copies:
            for buffers, host in zip(self.rank_buffers, self.host, strict=True):
                for name in self.cache_buffers:
                    if copy.readmit:
                        buffers[name][copy.page] = host[name][copy.host_page]
                    else:  # a continuation row is one page record of its cache plane's continuation plane
                        source = self.continuation_buffers[name] if copy.continuation else name
                        host[name][copy.host_page] = buffers[source][copy.page]

    def _apply_updates(self, plan: RoundPlan, *, check: bool) -> None:
        """Build each slot's page-table row from the updates; with `check` (the graph binds a page
        table by physical row), each lane's row must then be its page ids."""
        rows = self._page_rows
        for update in plan.page_table_updates:
            held = rows.get(update.slot, ())
            if update.start and update.start != len(held):
                raise PageTableMismatch(f"graph {plan.graph}, slot {update.slot}: an update from entry {update.start} "
                                        f"while the row holds {len(held)} entries")
            rows[update.slot] = (held if update.start else ()) + tuple(update.entries)
        for lane in plan.lanes if check else ():
            if rows.get(lane.slot) != tuple(lane.page_ids):
                raise PageTableMismatch(f"graph {plan.graph}, slot {lane.slot}: the updates leave the row "
                                        f"{list(rows.get(lane.slot, ()))}, the lane holds {list(lane.page_ids)}")


def _idle_lanes(graph: LoadedGraph, pages: int) -> list[LaneInput]:
    """A full lane set for timing `graph`: lane i in slot i, its pending token (id 0) at position 0,
    greedy, with the pages its widest round writes (page ids taken in turn from the cache)."""
    per_lane = -(-(graph.width + 1) // graph.page_tokens)
    limit = graph.lane_limit if graph.operation == C.OPERATION_SPECULATIVE else 0
    return [LaneInput(slot=i, generation=1, consumed=0, tokens=(0,), prompt_tokens_in_round=0, samples=True,
                      page_ids=tuple((i * per_lane + j) % pages for j in range(per_lane)), seed=0,
                      sampling=SamplingParams(temperature=0.0), output_limit=graph.width + 1, eos_ids=(),
                      prompt_token_ids=(0,), speculative_limit=limit)
            for i in range(graph.batch_capacity)]


def _graphs(core: CoreSource, serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest,
            ranks: int) -> dict[str, LoadedGraph]:
    """Every graph of the catalog: each rank's program read, checked and validated, its packing resolved."""
    buffer_descriptors = {b.name: b for b in manifest.buffers}
    contracts = {g.name: g for g in serving.model.graphs}
    graphs: dict[str, LoadedGraph] = {}
    for handle in manifest.graphs:
        if len(handle.program_resources) != ranks:
            raise EngineLoadError(f"graph {handle.name!r} has {len(handle.program_resources)} programs for "
                                  f"{ranks} ranks")
        programs, rank_operators = [], []
        for rank, resource in enumerate(handle.program_resources):
            program = program_pb2.Program.FromString(core.read(resource))
            if program.graph != handle.name or program.rank != rank:
                raise EngineLoadError(f"program {resource!r} belongs to {program.graph!r} rank {program.rank}, "
                                      f"not {handle.name!r} rank {rank}")
            programs.append(program)
            rank_operators.append(tuple(validate_program(program, buffer_descriptors)))
        if ranks > 1:
            check_lockstep(programs, rank_operators)
        else:
            for i, op in enumerate(rank_operators[0]):
                if op.op in RANK_COLLECTIVES and op.attributes["ranks"] != 1:
                    raise EngineLoadError(f"graph {handle.name!r} operators[{i}] ({op.op}) is over "
                                          f"{op.attributes['ranks']} ranks, the core has one")
        packing = GraphPacking.resolve(contracts[handle.name], manifest, physical_rows=serving.max_concurrency)
        page_table = any(b.source == C.VALUE_SOURCE_PAGE_TABLE and b.indexing == C.INDEXING_PHYSICAL_REQUEST_ROW
                         for b in packing.bindings)
        spec = contracts[handle.name].speculative if contracts[handle.name].HasField("speculative") else None
        geometry = {} if spec is None else {"width": spec.verify_tokens, "lane_limit": spec.lane_token_limit}
        graphs[handle.name] = LoadedGraph(handle.name, handle.operation, handle.batch_capacity,
                                          handle.packed_token_capacity, programs[0], rank_operators[0], packing,
                                          page_table, tuple(programs), tuple(rank_operators),
                                          page_tokens=serving.model.cache.page_tokens, **geometry)
    return graphs


def _load_weight(core: CoreSource, decl: program_pb2.TensorDecl) -> np.ndarray:
    data = core.read(decl.resource)
    shape = tuple(int(e) for e in decl.shape)
    count = int(np.prod(shape, dtype=np.int64))
    if decl.dtype == M.DTYPE_BF16:
        raw = np.frombuffer(data, dtype="<u2")
        values = bf16_to_f32(raw)
    elif decl.dtype in (M.DTYPE_F32, M.DTYPE_F16):
        values = np.frombuffer(data, dtype="<f4" if decl.dtype == M.DTYPE_F32 else "<f2")
    else:
        raise EngineLoadError(f"weight {decl.resource!r} has a non-float dtype {decl.dtype}")
    if values.size != count:
        raise EngineLoadError(f"weight {decl.resource!r} holds {values.size} values, its tensor declares {count}")
    return values.reshape(shape)

