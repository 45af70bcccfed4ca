"""The production executor (device side): round plans over static device buffers, in one or two
execution frames (the executor seam of `helios.runtime.rounds`).

    executor.submit(plan)          # apply page-table updates, pack, upload, launch; returns at once on a GPU
    rows = executor.collect(plan)  # wait for that round, read its frame's completion record back

A round is: apply the plan's page-table updates and pack the graph's value bindings with the shared
packer into host staging, upload what changed, write the transport-owned completion fields (frame
index, the plan's submission sequence), replay the graph's CUDA graph (or run its plan eagerly on a
CPU) and enqueue the copy of the completion record into the frame's read-back. `collect` returns the
rows as read (`CompletionRows` columns): the scheduler validates them, once.

Frames. With two frames (a transport declaring two, generating graphs keeping the pending token on
the device) the host packs round N+1 while the device runs round N. One stream orders the device
work: round N+1's uploads follow round N's graph, and its graph rewrites the completion record only
after round N's read-back copy was enqueued. What two frames add is on the host: one completion
read-back per frame (pinned on a GPU, copied asynchronously and fenced by an event; a copy on a CPU,
where rounds run synchronously at submission), and staging that is never repacked before the
previous round's uploads have run (an event recorded after each round's uploads).

Uploads. Rows addressed by physical request slot whose value is a function of the request (seed,
sampling parameters, prompt histogram, EOS ids, output limit, generation) are packed and uploaded
only when what they depend on changes (`REQUEST_KEYS`), and while a slot's request is unchanged they
are not even examined. Page-table rows are written from the plan's `PageTableUpdate`s alone (the
entries assigned since the slot's last upload, or the whole row for a new slot generation), into
every page-table destination with its binding's page offset. Everything else (tokens, positions,
per-round scalars) is packed and uploaded whole each round, since it is small. On a GPU the staging
is pinned host memory and every copy is asynchronous on the serving stream. On a CPU the staging is
the device buffer itself and uploads are no-ops, unless `separate_staging` (the GPU-paths mode,
helios/production/gpu_paths.py): then staging and read-backs are tensors of their own (not pinned)
and every upload is a real copy (whole buffer, one row, or a slice of a page-table row), as on a GPU.

Host tier. With `host_pages`, every cache plane has a host tensor of `host_pages` pages (pinned on a
GPU, plain on a CPU; `torch.empty`: never read before an offload wrote it); on a GPU they are
allocated on a thread from the executor's construction on and the first host-tier copy waits for
them (helios/production/host_memory.py: page-locking gigabytes takes seconds of a start). A plan's `page_copies`
(helios/engine/host_tier.py decides them) are enqueued first on the serving stream: an offload
copies a device page (or a continuation row) into its host page, a readmission a host page into a
device page, each asynchronous on a GPU and ordered by the stream before the round's uploads and
graph. Device pages are scattered (free-list order), so the copies go through a device staging of K
pages per plane allocated at load (`copy_staging_pages`: all planes together at most
COPY_STAGING_BYTES and the tier's size), in chunks of at most K copies that keep what applying them
one by one gives (`helios.runtime.rounds.copy_chunks`). Per chunk and plane: an `index_select` of
the offloaded pages into the staging and one copy per run of consecutive host pages of each
readmission into it (the gather), then one copy per run of consecutive host pages out of it into the
host tensor and an `index_copy_` of the readmitted pages into the plane (the scatter). The host tier
hands out consecutive host pages to pages offloaded together, so a readmitted 8k-token prefix is a
few chunks of a few large copies per plane, not one copy per page. The chunk's device page ids are
uploaded from one of COPY_INDEX_SLOTS host slots (pinned on a GPU), rewritten only once the upload
out of it has run (an event): a CPU run copies them (with `separate_staging`) or uses them in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from helios.errors import HeliosError
from helios.production.capture import GraphCapture, GraphNotCaptured
from helios.production.host_memory import HostTierMemory
from helios.production.kernels.sampling import needs_sort
from helios.production.plan import LaunchPlan
from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.completion import CompletionRows, read_completion, transport_sequence
from helios.runtime.costs import RoundCosts
from helios.runtime.engram import EngramGatherer, gatherers_for
from helios.runtime.packing import GraphPacking, LaneColumns, LaneInput, LaneOverflow, ResolvedBinding
from helios.runtime.rounds import (
    PageCopy,
    PageTableUpdate,
    RoundPlan,
    copy_chunks,
    full_rows,
    host_runs,
    single_round,
)
from helios.runtime.scores import read_prompt_scores

V, M = contract_pb2, manifest_pb2
# The completion fields only a SCORED_PREFILL round writes: read back after such a round alone.
_SCORE_FIELDS = frozenset({M.COMPLETION_FIELD_PROMPT_SCORES, M.COMPLETION_FIELD_PROMPT_SCORE_IDS})

__all__ = ["COPY_STAGING_BYTES", "REQUEST_KEYS", "ExecutorGraph", "FrameBusy", "FrameOrderViolated", "NativeExecutor",
           "copy_staging_pages"]

COPY_STAGING_BYTES = 256 * 2**20  # the bound of the host-tier copies' device staging, all planes together
COPY_INDEX_SLOTS = 8  # host index slots of the host-tier copies: chunks whose upload may be pending at once


def copy_staging_pages(host_pages: int, page_bytes: int) -> int:
    """Pages of the host-tier copies' device staging (every plane): at most COPY_STAGING_BYTES and
    the tier's own size, at least one page; 0 without a host tier."""
    if not host_pages:
        return 0
    return max(1, min(host_pages, COPY_STAGING_BYTES // max(page_bytes, 1)))


class FrameBusy(HeliosError):
    """A round was submitted into a frame whose previous round has not been collected, or outside the
    executor's frames."""


class FrameOrderViolated(HeliosError):
    """A round was collected out of submission order, twice, or without being submitted."""

# Physical-row sources whose row is a function of the lane's request, and what it depends on: such a
# row is packed and uploaded again only when that changes. (NOTE: a key holds the very objects the
# lane carries, so comparing it is O(1) while a request keeps its tuples, and exact when it does not.)
REQUEST_KEYS = {
    V.VALUE_SOURCE_SLOT: lambda lane: (lane.slot,),
    V.VALUE_SOURCE_GENERATION: lambda lane: (lane.generation,),
    V.VALUE_SOURCE_SEED_BITS: lambda lane: (lane.generation, lane.seed),
    V.VALUE_SOURCE_SAMPLING_PARAMETERS: lambda lane: (lane.generation, lane.sampling),
    V.VALUE_SOURCE_EOS_IDS: lambda lane: (lane.generation, lane.eos_ids),
    V.VALUE_SOURCE_PROMPT_HISTOGRAM: lambda lane: (lane.generation, lane.prompt_token_ids),
    V.VALUE_SOURCE_OUTPUT_LIMIT: lambda lane: (lane.generation, lane.output_limit),
    V.VALUE_SOURCE_CONSTANT: lambda lane: (),
}  # page-table rows are incremental instead: the plan's `PageTableUpdate`s


@dataclass(frozen=True, slots=True)
class ExecutorGraph:
    """One captured graph variant as the executor drives it."""

    name: str
    operation: int  # contract_pb2.Operation
    batch_capacity: int  # B
    packed_token_capacity: int  # P
    plan: LaunchPlan
    packing: GraphPacking


def _row_key(binding: ResolvedBinding, lane: LaneInput) -> tuple | None:
    """What a physical row's value depends on, or None when it must be packed every round."""
    key = REQUEST_KEYS.get(binding.source)
    return None if key is None else (binding.source, *key(lane))


@dataclass(frozen=True, slots=True)
class _Submitted:
    """A frame's submitted, uncollected round."""

    plan: RoundPlan
    slots: np.ndarray  # the lanes' request slots: the completion rows to read, lane order
    done: Any  # torch.cuda.Event recorded after the read-back copy, or None on a CPU


def _page_table_rows(binding: ResolvedBinding) -> bool:
    """A page table addressed by physical request slot: uploaded entry by entry as pages are assigned."""
    return binding.source == V.VALUE_SOURCE_PAGE_TABLE and binding.indexing == V.INDEXING_PHYSICAL_REQUEST_ROW


class NativeExecutor:
    """Runs round plans over static device buffers in `frames` execution frames; see the module docstring."""

    def __init__(self, graphs: Mapping[str, ExecutorGraph], buffers: Mapping[str, torch.Tensor],
                 completion: Mapping[int, str], *, frames: int = 1, device: torch.device,
                 capture: GraphCapture | None, separate_staging: bool = False,
                 cache_buffers: Sequence[str] = (), host_pages: int = 0,
                 continuation_buffers: Mapping[str, str] | None = None,
                 staging_pages: int | None = None) -> None:
        if frames not in (1, 2):
            raise ValueError(f"an executor holds 1 or 2 frames, got {frames}")
        self.graphs = dict(graphs)
        self.buffers = dict(buffers)
        self.completion = dict(completion)  # CompletionField -> buffer name
        self.frames = frames
        self.device = device
        self.capture = capture
        self.sequence = 0  # the last submitted plan's sequence
        pinned = device.type == "cuda"
        # staging (and read-backs) of their own, uploaded by copies: always on a GPU, on request on a CPU
        self.separate_staging = separate = pinned or separate_staging
        destinations = {b.destination for g in self.graphs.values() for b in g.packing.bindings}
        # Host staging of every transport destination: pinned on a GPU, the buffer itself on a CPU
        # (a tensor of its own with `separate_staging`).
        self.staging: dict[str, torch.Tensor] = {}
        for name in destinations:
            device_buffer = self.buffers[name]
            self.staging[name] = (torch.empty(device_buffer.shape, dtype=device_buffer.dtype, pin_memory=pinned)
                                  if separate else device_buffer)
        # (a BF16 destination as its bit patterns: packing writes bf16 values as uint16, NUMPY_DTYPES)
        self.host_view: dict[str, np.ndarray] = {
            n: t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()
            for n, t in self.staging.items()}
        # frame -> completion field -> host read-back of the round submitted in that frame (pinned on a
        # GPU; one frame on a CPU reads the completion buffers themselves, since rounds run at submit).
        self.frame_readback: list[dict[int, torch.Tensor]] = [
            {f: (self.buffers[name] if frames == 1 and not separate else
                 torch.empty(self.buffers[name].shape, dtype=self.buffers[name].dtype, pin_memory=pinned))
             for f, name in self.completion.items()} for _ in range(frames)]
        # the same read-backs as NumPy arrays (views of the same memory), made once: `collect` reads them
        self._readback_arrays: list[dict[int, np.ndarray]] = [
            {f: t.numpy() for f, t in readback.items()} for readback in self.frame_readback]
        self._in_flight: list[_Submitted | None] = [None] * frames  # frame -> its submitted, uncollected plan
        self._uploaded: torch.cuda.Event | None = None  # after the last round's uploads (GPU): staging is free
        self.peak_outstanding = 0  # the most rounds ever outstanding at once (right after a submission)
        self.cache_buffers = tuple(cache_buffers)
        self.continuation_buffers = dict(continuation_buffers or {})  # cache plane -> its continuation plane
        self.host_pages = host_pages
        tiered = tuple(self.cache_buffers) if host_pages else ()  # the planes the host tier holds
        # The host-tier copies' device side (`_copy_pages`), allocated here: serving allocates nothing.
        # K pages of staging per plane (copy_staging_pages, or `staging_pages`), and COPY_INDEX_SLOTS
        # slots of K device page ids, each uploaded from its own host slot (pinned on a GPU) and fenced.
        self.staging_pages = (0 if not tiered else staging_pages if staging_pages is not None
                              else copy_staging_pages(host_pages, self.page_bytes))
        if tiered and self.staging_pages < 1:
            raise ValueError(f"host-tier copies need at least one staging page, got {self.staging_pages}")
        self.copy_staging: dict[str, torch.Tensor] = {  # cache plane -> [K, ...one page...], device
            name: torch.empty((self.staging_pages, *self.buffers[name].shape[1:]), dtype=self.buffers[name].dtype,
                              device=device)
            for name in tiered}
        slots = COPY_INDEX_SLOTS if tiered else 0
        self._copy_index = torch.empty((slots, self.staging_pages), dtype=torch.int64, device=device)  # device
        self._copy_index_host = (torch.empty((slots, self.staging_pages), dtype=torch.int64,
                                             pin_memory=pinned and bool(slots))
                                 if separate else self._copy_index)  # [slots, K] int64, host
        self._copy_index_values = self._copy_index_host.numpy()
        # the host tier, cache plane -> [host_pages, ...one page...]: pinned on a thread on a GPU (last,
        # after this load's other pinned allocations), waited for at its first use (`host`)
        self._host_memory = HostTierMemory({name: ((host_pages, *self.buffers[name].shape[1:]), self.buffers[name].dtype)
                                            for name in tiered}, pinned=pinned)
        # after the upload out of each host slot (GPU): the slot may be rewritten once it completed
        self._copy_index_fences = [torch.cuda.Event() for _ in range(slots)] if pinned else []
        self._copy_index_next = 0  # the host slot the next chunk writes
        self.submissions_while_outstanding = 0  # rounds submitted while another was still outstanding
        # Page-table destinations written only through physical request rows, with one page offset and
        # padding whichever graph binds them: the plan's updates are applied to each. A destination
        # some binding also writes otherwise, or that graphs bind with different offsets, is packed
        # whole from the lanes every round instead.
        tables: dict[str, set[ResolvedBinding]] = {}
        other: set[str] = set()
        for graph in self.graphs.values():
            for binding in graph.packing.bindings:
                (tables.setdefault(binding.destination, set()).add(binding) if _page_table_rows(binding)
                 else other.add(binding.destination))
        self._page_tables = {name: next(iter(bindings)) for name, bindings in tables.items()
                             if name not in other and len({(b.offset, b.padding) for b in bindings}) == 1}
        self.page_entries_uploaded = 0  # page-table entries written to the device (incremental uploads)
        self.costs: RoundCosts | None = None  # measured round costs (NativeModel.load with measure_costs)
        # Engram tables (docs/engram.md, helios/production/engram.py): each table's gatherer, filled
        # before a consuming round is launched, its frame retired when the round is collected
        self.engram: tuple[EngramGatherer, ...] = ()
        # destination -> slot -> (binding, what the row was packed from): rows packed once per request.
        # A row is valid for the binding (source, offset, padding, extents) that wrote it; equal bindings
        # of different graphs share one identity, so switching graphs repacks nothing.
        self._row_keys: dict[str, dict[int, tuple]] = {}
        # The fast path over `_row_keys`: slot -> what the lane's request rows depend on (slot generation,
        # seed, sampling, EOS ids, prompt, output limit) as last packed; and destination -> (binding
        # identity, per-slot flags): rows whose remembered key was checked while the slot's request
        # stayed the same, so `_row_key` would give the same answer and the row is skipped unexamined.
        self._requests: dict[int, tuple] = {}
        self._rank_filtering: set[int] = set()  # slots whose noted request filters by rank (top-k/p, min-p)
        self._rank_sorting: set[int] = set()  # those whose filters could make a chunked rank stage stream
        self._columns: LaneColumns | None = None  # the lanes of the round packed last, as columns
        self._confirmed: dict[str, tuple[int, np.ndarray]] = {}
        identities: dict[ResolvedBinding, int] = {}
        self._binding_ids = {id(b): identities.setdefault(b, len(identities))
                             for g in self.graphs.values() for b in g.packing.bindings}
        self._orders = {name: tuple(sorted(g.packing.bindings, key=lambda b: b.source == V.VALUE_SOURCE_PENDING_TOKEN))
                        for name, g in self.graphs.items()}
        for graph in self.graphs.values():
            graph.packing.initialize(self.host_view)
        for name in destinations:
            self._upload(name)

    def round_costs(self) -> RoundCosts | None:
        """The round costs measured at load (None: not measured; `helios.runtime.costs`)."""
        return self.costs

    @property
    def outstanding(self) -> int:
        """Plans submitted and not yet collected."""
        return sum(entry is not None for entry in self._in_flight)

    # ------------------------------------------------------------------------------------------ rounds

    def submit(self, plan: RoundPlan) -> None:
        """Apply `plan`'s page-table updates, pack its lanes, upload, launch its graph in its frame and
        enqueue the frame's read-back; no wait for the device except for the previous round's uploads
        out of the shared staging."""
        frame = plan.frame
        if frame not in range(self.frames):
            raise FrameBusy(f"graph {plan.graph}: frame {frame} outside the executor's {self.frames} frames")
        if self._in_flight[frame] is not None:
            raise FrameBusy(f"graph {plan.graph}: frame {frame} still holds an uncollected round "
                            f"({self.outstanding} outstanding)")
        graph = self.graphs.get(plan.graph)
        if graph is None:
            raise GraphNotCaptured(f"graph {plan.graph!r} is not loaded (loaded: {sorted(self.graphs)})")
        self.sequence = plan.sequence
        gpu = self.device.type == "cuda"
        if plan.page_copies:
            self._copy_pages(plan, gpu)
        if self._uploaded is not None:
            self._uploaded.synchronize()  # the previous round's copies have left the staging
        self._pack(graph, plan.lanes, plan.page_table_updates)
        staged = gatherers_for(self.engram, plan.graph)
        try:
            for gatherer in staged:  # a free frame of each table (EngramFrameBusy while both are held)
                gatherer.fill(plan.sequence, plan.lanes)
            if gpu:
                self._uploaded = torch.cuda.Event()
                self._uploaded.record(torch.cuda.current_stream(self.device))
            self._execute(graph, frame, plan.sequence)
        except BaseException:
            for gatherer in staged:  # the round was not launched: nothing consumes its frames
                gatherer.retire(plan.sequence)
            raise
        readback = self.frame_readback[frame]
        scored = plan.operation == contract_pb2.OPERATION_SCORED_PREFILL
        for field, host in readback.items():
            if field in _SCORE_FIELDS and not scored:  # only a scored prefill writes them: nothing to read
                continue
            device_buffer = self.buffers[self.completion[field]]
            if host is not device_buffer:
                host.copy_(device_buffer, non_blocking=gpu)
        done = None
        if gpu:
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
        if self.outstanding:
            self.submissions_while_outstanding += 1
        self._in_flight[frame] = _Submitted(plan, self._lane_columns(plan.lanes).slots, done)
        self.peak_outstanding = max(self.peak_outstanding, self.outstanding)

    def collect(self, plan: RoundPlan) -> CompletionRows:
        """Wait for `plan` (the oldest outstanding round) and read its frame's completion record back,
        one row per lane in lane order (unvalidated: the scheduler validates)."""
        entry = self._in_flight[plan.frame] if plan.frame in range(self.frames) else None
        if entry is None or entry.plan is not plan:
            raise FrameOrderViolated(f"graph {plan.graph}: round {plan.sequence} was not submitted in frame "
                                     f"{plan.frame}, or was collected already")
        if any(other is not None and other.plan.sequence < plan.sequence for other in self._in_flight):
            raise FrameOrderViolated(f"graph {plan.graph}: round {plan.sequence} collected before an older round")
        self._in_flight[plan.frame] = None
        if entry.done is not None:
            entry.done.synchronize()
        for gatherer in self.engram:  # the round's consumer retired: its staging frames may be refilled
            gatherer.retire(plan.sequence)
        host = self._readback_arrays[plan.frame]
        rows = read_completion(host, entry.slots, len(plan.lanes),
                               speculative=plan.operation == contract_pb2.OPERATION_SPECULATIVE)
        if plan.operation == contract_pb2.OPERATION_SCORED_PREFILL:
            rows.scores = read_prompt_scores(host, sum(len(lane.tokens) for lane in plan.lanes))
        return rows

    def run_round(self, graph_name: str, lanes: Sequence[LaneInput]) -> CompletionRows:
        """One round outside a scheduler (tests, benches): a plan that rewrites every lane's page-table
        row, submitted in frame 0 and collected; its rows are unvalidated, like `collect`'s."""
        if self.outstanding:
            raise FrameBusy(f"graph {graph_name}: a single round while {self.outstanding} rounds are outstanding")
        graph = self.graphs.get(graph_name)
        if graph is None:
            raise GraphNotCaptured(f"graph {graph_name!r} is not loaded (loaded: {sorted(self.graphs)})")
        plan = single_round(graph_name, graph.operation, lanes, sequence=self.sequence + 1)
        self.submit(plan)
        return self.collect(plan)

    # ------------------------------------------------------------------------------------------ packing

    def _pack(self, graph: ExecutorGraph, lanes: Sequence[LaneInput],
              page_table_updates: Sequence[PageTableUpdate] | None = None) -> None:
        """Stage one round: the page-table updates (None: rewrite each lane's whole row), then every
        other binding of the graph."""
        try:
            self._apply_updates(full_rows(lanes) if page_table_updates is None else page_table_updates)
            self._pack_bindings(graph, lanes)
        except BaseException:
            # Rows this call wrote may be staged but not uploaded: remember none, repack them next time.
            self._row_keys.clear()
            self._confirmed.clear()
            raise

    def _apply_updates(self, updates: Sequence[PageTableUpdate]) -> None:
        """Write each update into every incrementally kept page-table destination (its binding's page
        offset added), and upload the entries written; a whole-row update (start 0) pads the rest of
        the row."""
        if not updates:
            return
        for destination, binding in self._page_tables.items():
            view = self.host_view[destination]
            view = view.reshape(view.shape[0], -1)
            width = view.shape[1]
            for update in updates:
                end = update.start + len(update.entries)
                if end > width:
                    raise LaneOverflow(f"{destination}: {end} page ids exceed the row width {width}")
                if not 0 <= update.slot < view.shape[0]:
                    raise LaneOverflow(f"{destination}: slot {update.slot} outside {view.shape[0]} rows")
                row = view[update.slot]
                row[update.start:end] = np.asarray(update.entries, dtype=np.int64) + binding.offset
                if update.start == 0:
                    row[end:] = binding.padding
                    self._upload(destination, update.slot)
                elif end > update.start:
                    self._upload(destination, update.slot, slice(update.start, end))
        self.page_entries_uploaded += sum(len(update.entries) for update in updates)

    def _pack_bindings(self, graph: ExecutorGraph, lanes: Sequence[LaneInput]) -> None:
        packing = graph.packing
        if len(lanes) > packing.batch_capacity:
            raise ValueError(f"graph {graph.name}: {len(lanes)} lanes exceed the batch capacity")
        columns = self._columns = LaneColumns.of(lanes)
        self._note_requests(lanes)
        whole: set[str] = set()
        for binding in self._orders[graph.name]:
            destination = binding.destination
            host = self.host_view[destination]
            if binding.indexing != V.INDEXING_PHYSICAL_REQUEST_ROW:
                binding.write(host, lanes, columns)
                whole.add(destination)
                # rows this write covered no longer hold what a physical-row binding packed there
                self._forget(destination)
                continue
            if destination in self._page_tables:
                continue  # incremental: the plan's page-table updates (`_apply_updates`)
            identity = self._binding_ids[id(binding)]
            held = self._row_keys.setdefault(destination, {})
            if binding.source not in REQUEST_KEYS:  # a per-round value: every lane's row, every round
                binding.write(host, lanes, columns)
                if held:  # whatever was remembered for these rows is gone
                    for lane in lanes:
                        held.pop(lane.slot, None)
                self._confirmed.pop(destination, None)
                whole.add(destination)
                continue
            confirmed = self._confirmed.get(destination)
            if confirmed is None or confirmed[0] != identity:
                confirmed = self._confirmed[destination] = (identity, np.zeros(host.shape[0], dtype=bool))
            flags = confirmed[1]
            examine = np.flatnonzero(~flags[columns.slots])
            if not examine.size:
                continue  # every row is the one packed for the slot's current request
            changed, keys = [], []
            for i in examine.tolist():
                lane = lanes[i]
                key = _row_key(binding, lane)
                if key is None or held.get(lane.slot) != (identity, key):
                    changed.append(lane)
                    keys.append(key)
                else:
                    flags[lane.slot] = True
            if not changed:
                continue
            binding.write(host, changed)
            for lane, key in zip(changed, keys, strict=True):  # remembered once written, not before
                if key is not None:
                    held[lane.slot] = (identity, key)
                    flags[lane.slot] = True
                else:  # a per-round value now: whatever was remembered for the row is gone
                    held.pop(lane.slot, None)
                    flags[lane.slot] = False
            if _row_key(binding, changed[0]) is None or len(changed) * 4 > host.shape[0]:
                whole.add(destination)
            elif destination not in whole:
                for lane in changed:
                    self._upload(destination, lane.slot)
        for name in whole:
            self._upload(name)

    def _note_requests(self, lanes: Sequence[LaneInput]) -> None:
        """Unconfirm every remembered row of a slot whose request changed since it was last packed."""
        requests = self._requests
        moved = []
        for lane in lanes:
            request = (lane.generation, lane.seed, lane.sampling, lane.eos_ids, lane.prompt_token_ids,
                       lane.output_limit)
            if requests.get(lane.slot) != request:
                requests[lane.slot] = request
                moved.append(lane.slot)
                if lane.sampling.rank_filtered:
                    self._rank_filtering.add(lane.slot)
                else:
                    self._rank_filtering.discard(lane.slot)
                s = lane.sampling
                if needs_sort(s.temperature, s.top_k, s.top_p):
                    self._rank_sorting.add(lane.slot)
                else:
                    self._rank_sorting.discard(lane.slot)
        if moved:
            for _, flags in self._confirmed.values():
                flags[moved] = False

    def _forget(self, destination: str) -> None:
        self._row_keys.pop(destination, None)
        self._confirmed.pop(destination, None)

    def _upload(self, name: str, row: int | None = None, columns: slice | None = None) -> None:
        """Copy staging to the device: the whole buffer, one physical row, or a slice of that row."""
        if not self.separate_staging:
            return  # the staging is the buffer
        if row is None:
            self.buffers[name].copy_(self.staging[name], non_blocking=True)
        elif columns is None:
            self.buffers[name][row].copy_(self.staging[name][row], non_blocking=True)
        else:
            self.buffers[name][row, columns].copy_(self.staging[name][row, columns], non_blocking=True)

    @property
    def host(self) -> dict[str, torch.Tensor]:
        """The host tier: cache plane -> [host_pages, ...one page...] (empty without one); the first
        use waits for its allocation (helios/production/host_memory.py)."""
        return self._host_memory.tensors

    @property
    def page_bytes(self) -> int:
        """Bytes of one page of every cache plane (a host-tier page)."""
        return sum(self.buffers[name][0].nbytes for name in self.cache_buffers)

    def _copy_pages(self, plan: RoundPlan, gpu: bool) -> None:
        """The plan's host-tier copies on the serving stream (asynchronous on a GPU), chunk by chunk
        (`copy_chunks`: each gathers every source before it writes any destination)."""
        if not self.copy_staging:
            raise GraphNotCaptured(f"round {plan.sequence} carries host-tier copies; the executor has no host tier")
        for chunk in copy_chunks(plan.page_copies, self.staging_pages):
            self._copy_chunk(chunk, gpu)

    def _copy_chunk(self, chunk: Sequence[PageCopy], gpu: bool) -> None:
        """One chunk of at most K copies through the device staging, plane by plane:

            staging rows   [0, p)            [p, o)                  [o, n)
                           offloaded pages   offloaded continuations readmissions, each by host page
            gather         index_select      index_select            host -> staging, a copy per host run
            scatter        staging -> host, a copy per host run      index_copy_ into the plane

        so an offload or readmission of scattered device pages costs a few launches per plane, not
        one copy per page."""
        offloads = sorted((c for c in chunk if not c.readmit), key=lambda c: (c.continuation, c.host_page))
        readmits = sorted((c for c in chunk if c.readmit), key=lambda c: c.host_page)
        p = sum(not c.continuation for c in offloads)
        o, n = len(offloads), len(chunk)
        index = self._upload_copy_index([c.page for c in offloads] + [c.page for c in readmits], gpu)
        out_runs, in_runs = host_runs(offloads), host_runs(readmits)
        for name in self.cache_buffers:
            staging, plane, host = self.copy_staging[name], self.buffers[name], self.host[name]
            if p:
                torch.index_select(plane, 0, index[:p], out=staging[:p])
            if o > p:  # a row of the continuation plane is one page record
                torch.index_select(self.buffers[self.continuation_buffers[name]], 0, index[p:o], out=staging[p:o])
            for first, host_page, count in in_runs:
                staging[o + first:o + first + count].copy_(host[host_page:host_page + count], non_blocking=gpu)
            for first, host_page, count in out_runs:
                host[host_page:host_page + count].copy_(staging[first:first + count], non_blocking=gpu)
            if n > o:
                plane.index_copy_(0, index[o:n], staging[o:n])

    def _upload_copy_index(self, pages: Sequence[int], gpu: bool) -> torch.Tensor:
        """`pages` as a device int64 tensor, through the next host index slot.

        NOTE: a host slot is rewritten only once the upload out of it has run (its fence): on a GPU
        the copy is asynchronous and may still be pending from an earlier chunk or round. The ring
        of COPY_INDEX_SLOTS slots makes that wait rare (a round of more chunks waits for the stream to
        reach the chunk that many before). The device slot needs no fence: its readers precede the
        next upload into it on the stream."""
        slot = self._copy_index_next
        self._copy_index_next = (slot + 1) % len(self._copy_index_values)
        if self._copy_index_fences:
            self._copy_index_fences[slot].synchronize()
        count = len(pages)
        self._copy_index_values[slot, :count] = pages
        device = self._copy_index[slot, :count]
        if self._copy_index_host is not self._copy_index:
            device.copy_(self._copy_index_host[slot, :count], non_blocking=gpu)
            if self._copy_index_fences:
                self._copy_index_fences[slot].record(torch.cuda.current_stream(self.device))
        return device

    def _execute(self, graph: ExecutorGraph, frame: int, sequence: int) -> None:
        # NOTE: the transport owns frame index and submission sequence; programs never write them.
        index = self.completion.get(M.COMPLETION_FIELD_FRAME_INDEX)
        if index is not None:
            self.buffers[index].fill_(frame)
        written = self.completion.get(M.COMPLETION_FIELD_SUBMISSION_SEQUENCE)
        if written is not None:
            self.buffers[written].fill_(transport_sequence(sequence))
        form = self._rank_form()
        if self.capture is not None:
            self.capture.replay(graph.name, rank_form=form)
        else:
            graph.plan.run(rank_form=form)

    def _rank_form(self) -> str:
        """The round's rank form (kernels/sampling.py): "off" where no lane that samples this round
        filters by rank (top-k, top-p or min-p), "sort" where one's filters could make a chunked rank
        stage stream its row (`needs_sort`; plans without a chunked sampler run their own form then),
        else "own"."""
        columns = self._columns
        if not self._rank_filtering:  # no slot's request filters by rank: nothing to look at per lane
            return "off"
        sorting, form = self._rank_sorting, "off"
        for lane in columns.lanes:
            if lane.samples and lane.sampling.rank_filtered:
                if lane.slot in sorting:
                    return "sort"
                form = "own"
                if not sorting:  # no slot's request could need the sort: the first such lane decides
                    break
        return form

    def _lane_columns(self, lanes: Sequence[LaneInput]) -> LaneColumns:
        """The columns packing built for this round's lanes (or new ones for other lanes)."""
        columns = self._columns
        return columns if columns is not None and columns.lanes is lanes else LaneColumns(lanes)
