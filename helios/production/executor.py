"""The production executor (device side): one graph over a cohort in, completion rows out.

    rows = executor.run_round(graph_name, lanes)     # lanes: helios.runtime.packing.LaneInput

It is the same seam as `ReferenceEngine.run_round`, so a scheduler (or the reference engine's own
sequential loop) and the trace audit can drive either runtime. A round is: pack the graph's value
bindings with the shared packer into host staging, upload what changed, write the transport-owned
completion fields (frame index, submission sequence), replay the graph's CUDA graph (or run its plan
eagerly on a CPU), read the completion record back and validate every lane's row before returning it.

Uploads. Rows addressed by physical request slot whose value is a function of the request (seed,
sampling parameters, prompt histogram, EOS ids, output limit, generation) are packed and uploaded
only when what they depend on changes (`REQUEST_KEYS`), and while a slot's request is unchanged they
are not even examined; a slot's page-table row uploads only the
entries assigned since its last upload, and a new slot generation rewrites the row (rows whose lane
carries the very page tuple last uploaded under the same generation are found by one array comparison
and not visited); everything else
(tokens, positions, per-round scalars) is packed and uploaded whole each round, since it is small. On a GPU the
staging is pinned host memory and every copy is asynchronous on the serving stream. The completion
record comes back as columns (`CompletionRows`), validated by array comparisons; reading it and the
row checks are readback.py's (host side), and `CompletionInvalid` is re-exported here.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from helios.production.capture import GraphCapture, GraphNotCaptured
from helios.production.plan import LaunchPlan
from helios.production.readback import CompletionInvalid, read_rows, validate_row, validate_rows
from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.completion import Completion, CompletionRows, transport_sequence
from helios.runtime.packing import GraphPacking, LaneColumns, LaneInput, LaneOverflow, ResolvedBinding

V, M = contract_pb2, manifest_pb2

__all__ = ["REQUEST_KEYS", "CompletionInvalid", "ExecutorGraph", "NativeExecutor"]

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
}  # page-table rows are incremental instead: `NativeExecutor._pack_page_table`


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


def _page_table_rows(binding: ResolvedBinding) -> bool:
    """A page table addressed by physical request slot: uploaded entry by entry as pages are assigned."""
    return binding.source == V.VALUE_SOURCE_PAGE_TABLE and binding.indexing == V.INDEXING_PHYSICAL_REQUEST_ROW


class _PageRows:
    """One destination's page-table rows as the device holds them: per slot (binding identity, slot
    generation, page ids), and the same three as slot-indexed arrays (the page ids by `id()`), so a round
    finds the rows it leaves unchanged with array comparisons. The held tuples stay referenced here, so
    an equal `id()` is the very tuple that was uploaded."""

    __slots__ = ("generations", "held", "identities", "ids")

    def __init__(self, slots: int) -> None:
        self.held: dict[int, tuple[int, int, tuple[int, ...]]] = {}
        self.ids = np.zeros(slots, dtype=np.uint64)
        self.generations = np.full(slots, -1, dtype=np.int64)
        self.identities = np.full(slots, -1, dtype=np.int64)

    def hold(self, slot: int, identity: int, generation: int, pages: tuple[int, ...]) -> None:
        self.held[slot] = (identity, generation, pages)
        self.ids[slot], self.generations[slot], self.identities[slot] = id(pages), generation, identity

    def changed(self, identity: int, columns: LaneColumns, page_ids: np.ndarray) -> np.ndarray:
        """Indices of the lanes whose row may differ from the device's (the rest are current)."""
        slots = columns.slots
        if slots.size and (slots.min() < 0 or slots.max() >= self.ids.shape[0]):
            return np.arange(slots.size)  # examined lane by lane, which reports the bad slot
        same = ((self.ids[slots] == page_ids) & (self.identities[slots] == identity)
                & (self.generations[slots] == columns.scalar(V.VALUE_SOURCE_GENERATION)))
        return np.flatnonzero(~same)


_PAGE_IDS = operator.attrgetter("page_ids")


class NativeExecutor:
    """Runs rounds over static device buffers; see the module docstring."""

    def __init__(self, graphs: Mapping[str, ExecutorGraph], buffers: Mapping[str, torch.Tensor],
                 completion: Mapping[int, str], *, sampled_tokens: int, device: torch.device,
                 capture: GraphCapture | None) -> None:
        self.graphs = dict(graphs)
        self.buffers = dict(buffers)
        self.completion = dict(completion)  # CompletionField -> buffer name
        self.sampled_tokens = sampled_tokens
        self.device = device
        self.capture = capture
        self.sequence = 0
        pinned = device.type == "cuda"
        destinations = {b.destination for g in self.graphs.values() for b in g.packing.bindings}
        # Host staging of every transport destination: pinned on a GPU, the buffer itself on a CPU.
        self.staging: dict[str, torch.Tensor] = {}
        for name in destinations:
            device_buffer = self.buffers[name]
            self.staging[name] = (torch.empty(device_buffer.shape, dtype=device_buffer.dtype, pin_memory=True)
                                  if pinned else device_buffer)
        self.host_view: dict[str, np.ndarray] = {n: t.numpy() for n, t in self.staging.items()}
        self.readback: dict[int, torch.Tensor] = {
            field: (torch.empty(self.buffers[name].shape, dtype=self.buffers[name].dtype, pin_memory=True)
                    if pinned else self.buffers[name])
            for field, name in self.completion.items()
        }
        # destination -> slot -> (binding, what the row was packed from): rows packed once per request.
        # A row is valid for the binding (source, offset, padding, extents) that wrote it; equal bindings
        # of different graphs share one identity, so switching graphs repacks nothing.
        self._row_keys: dict[str, dict[int, tuple]] = {}
        # destination -> slot -> (binding, slot generation, page ids on the device): page-table rows,
        # extended by the newly assigned entries only; a new generation (or another binding) rewrites it.
        self._page_rows: dict[str, _PageRows] = {}
        # The fast path over `_row_keys`: slot -> what the lane's request rows depend on (slot generation,
        # seed, sampling, EOS ids, prompt, output limit) as last packed; and destination -> (binding
        # identity, per-slot flags): rows whose remembered key was checked while the slot's request
        # stayed the same, so `_row_key` would give the same answer and the row is skipped unexamined.
        self._requests: dict[int, tuple] = {}
        self._rank_filtering: set[int] = set()  # slots whose noted request filters by rank (top-k/p, min-p)
        self._columns: LaneColumns | None = None  # the lanes of the round packed last, as columns
        self._confirmed: dict[str, tuple[int, np.ndarray]] = {}
        identities: dict[ResolvedBinding, int] = {}
        self._binding_ids = {id(b): identities.setdefault(b, len(identities))
                             for g in self.graphs.values() for b in g.packing.bindings}
        self._orders = {name: tuple(sorted(g.packing.bindings, key=lambda b: b.source == V.VALUE_SOURCE_PENDING_TOKEN))
                        for name, g in self.graphs.items()}
        self.page_entries_uploaded = 0  # page-table entries written to the device (incremental uploads)
        for graph in self.graphs.values():
            graph.packing.initialize(self.host_view)
        for name in destinations:
            self._upload(name)

    # ------------------------------------------------------------------------------------------ round

    def run_round(self, graph_name: str, lanes: Sequence[LaneInput]) -> CompletionRows:
        # The transport numbers every submission, one that fails before the graph runs included, so the
        # next rounds' completions still answer the sequence a scheduler numbered them with.
        self.sequence += 1
        graph = self.graphs.get(graph_name)
        if graph is None:
            raise GraphNotCaptured(f"graph {graph_name!r} is not loaded (loaded: {sorted(self.graphs)})")
        self._pack(graph, lanes)
        self._execute(graph)
        rows = self._read(lanes)
        self._validate_all(graph_name, lanes, rows)
        return rows

    def _pack(self, graph: ExecutorGraph, lanes: Sequence[LaneInput]) -> None:
        try:
            self._pack_bindings(graph, lanes)
        except BaseException:
            # Rows this call wrote may be staged but not uploaded: remember none, repack them next time.
            self._row_keys.clear()
            self._page_rows.clear()
            self._confirmed.clear()
            raise

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
            identity = self._binding_ids[id(binding)]
            if _page_table_rows(binding):
                self._pack_page_table(binding, identity, host, lanes, columns)
                continue
            held = self._row_keys.setdefault(destination, {})
            self._page_rows.pop(destination, None)
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
        if moved:
            for _, flags in self._confirmed.values():
                flags[moved] = False

    def _forget(self, destination: str) -> None:
        self._row_keys.pop(destination, None)
        self._page_rows.pop(destination, None)
        self._confirmed.pop(destination, None)

    def _pack_page_table(self, binding: ResolvedBinding, identity: int, host: np.ndarray,
                         lanes: Sequence[LaneInput], columns: LaneColumns) -> None:
        """Upload only the page-table entries assigned since the slot's last upload under the same
        generation (pages of a request only grow); a new generation rewrites the slot's whole row."""
        destination = binding.destination
        rows = self._page_rows.get(destination)
        if rows is None:
            rows = self._page_rows[destination] = _PageRows(host.shape[0])
        self._row_keys.pop(destination, None)
        self._confirmed.pop(destination, None)
        view = host.reshape(host.shape[0], -1)
        ids = np.fromiter(map(id, map(_PAGE_IDS, lanes)), dtype=np.uint64, count=len(lanes))
        for i in rows.changed(identity, columns, ids).tolist():
            lane = lanes[i]
            pages = lane.page_ids
            held = rows.held.get(lane.slot)
            if held is not None and held[0] == identity and held[1] == lane.generation:
                known = held[2]
                if pages == known:
                    continue  # nothing new: the device row is current
                start = len(known)
                if len(pages) > start and pages[:start] == known:
                    if len(pages) > view.shape[1]:
                        raise LaneOverflow(f"{destination}: {len(pages)} page ids exceed the row width "
                                           f"{view.shape[1]}")
                    view[lane.slot, start:len(pages)] = np.asarray(pages[start:], dtype=np.int64) + binding.offset
                    rows.hold(lane.slot, identity, lane.generation, pages)
                    self.page_entries_uploaded += len(pages) - start
                    self._upload(destination, lane.slot, slice(start, len(pages)))
                    continue
            binding.write(host, [lane])  # a new request in the slot: its whole row, padding included
            rows.hold(lane.slot, identity, lane.generation, pages)
            self.page_entries_uploaded += len(pages)
            self._upload(destination, lane.slot)

    def _upload(self, name: str, row: int | None = None, columns: slice | None = None) -> None:
        """Copy staging to the device: the whole buffer, one physical row, or a slice of that row."""
        if self.device.type != "cuda":
            return  # the staging is the buffer
        if row is None:
            self.buffers[name].copy_(self.staging[name], non_blocking=True)
        elif columns is None:
            self.buffers[name][row].copy_(self.staging[name][row], non_blocking=True)
        else:
            self.buffers[name][row, columns].copy_(self.staging[name][row, columns], non_blocking=True)

    def _execute(self, graph: ExecutorGraph, frame: int = 0) -> None:
        # NOTE: the transport owns frame index and submission sequence; programs never write them.
        index = self.completion.get(M.COMPLETION_FIELD_FRAME_INDEX)
        if index is not None:
            self.buffers[index].fill_(frame)
        sequence = self.completion.get(M.COMPLETION_FIELD_SUBMISSION_SEQUENCE)
        if sequence is not None:
            self.buffers[sequence].fill_(transport_sequence(self.sequence))
        filtered = self._rank_filtered()
        if self.capture is not None:
            self.capture.replay(graph.name, rank_filters=filtered)
        else:
            graph.plan.run(rank_filters=filtered)

    def _rank_filtered(self) -> bool:
        """Whether a lane that samples this round filters by rank (top-k, top-p or min-p): otherwise
        the round runs its graph's form without the sampler's rank stage (kernels/sampling.py)."""
        columns = self._columns
        if columns is None:
            return True
        if not self._rank_filtering:  # no slot's request filters by rank: nothing to look at per lane
            return False
        return any(lane.samples and lane.sampling.rank_filtered for lane in columns.lanes)

    def _read(self, lanes: Sequence[LaneInput]) -> CompletionRows:
        if self.device.type == "cuda":
            for field, host in self.readback.items():
                host.copy_(self.buffers[self.completion[field]], non_blocking=True)
            torch.cuda.current_stream(self.device).synchronize()
        return read_rows(self.readback, self._lane_columns(lanes).slots, len(lanes))

    def _lane_columns(self, lanes: Sequence[LaneInput]) -> LaneColumns:
        """The columns packing built for this round's lanes (or new ones for other lanes)."""
        columns = self._columns
        return columns if columns is not None and columns.lanes is lanes else LaneColumns(lanes)

    def _validate_all(self, graph_name: str, lanes: Sequence[LaneInput], rows: Sequence[Completion]) -> None:
        """The checks of `validate` for a whole cohort at once (readback.py: `validate_rows`)."""
        validate_rows(graph_name, lanes, rows, self._lane_columns, sequence=self.sequence,
                      sampled_tokens=self.sampled_tokens)

    def validate(self, graph_name: str, lane: LaneInput, row: Completion) -> None:
        """Reject a completion row that disagrees with the lane's round, before any token is accepted."""
        validate_row(graph_name, lane, row, sequence=self.sequence, sampled_tokens=self.sampled_tokens)
