"""Round state of the trace audit (host side, NumPy only): what a round wrote, recorded and compared.

    spec = StateSpec.of(serving, manifest)
    state = capture(spec, graph, lanes, buffers, scratch=plan_scratch)   # the recorder, after a submission
    found = compare(spec, graph, lanes, reference_buffers, reference_logits, state, dtype)   # the audit

A round writes, per lane, the cache records of the positions it consumes, [consumed, consumed +
len(tokens)), in every cache plane its graph declares writable (`state_accesses` on a CACHE buffer):
position p lives on page `page_ids[p // page_tokens]` at offset `p % page_tokens`. It also writes the
rows of its persistent state views (STATE buffers its graph declares writable, one row per request
slot: the device-owned pending token and a recurrent history's live state rows among them), and its sampling site reads one logits row per
sampling lane. `capture` reads exactly those from a runtime's buffers (arrays or device tensors,
duck-typed: this module never imports torch); the recorded state of a round is a mapping

    "cache.<plane>"   rows: flat record indices page * page_tokens + offset, lanes in submission order,
                      positions ascending; values [n, *record shape] (kv heads, head dim)
    "logits.<name>"   rows: the logits rows of the sampling lanes; values [n, vocabulary]
    "state.<buffer>"  rows: the lanes' slots; values [n, elements of the view's row]
    "continuation.<plane>"  rows: the continuation rows a RESTORATION round's lanes snapshot into;
                      values [n, page tokens, *record shape]
    "readmit.<plane>" rows: the pages the round's host-tier copies readmitted (in copy order, each
                      once); values [n, page tokens, *record shape], read after the copies

A RESTORATION lane consumes nothing; a lane restoring a snapshot writes the whole page holding its
endpoint (every record of it, in every cache plane), and a lane snapshotting writes one row of every
continuation plane (docs/snapshots.md).

and `compare` checks it against the reference's buffers after the same round: cache planes first,
in layer order (the first differing layer is the most upstream one), then the logits, then the
state rows. Floats agree within the precision's state tolerance against the record's scale
(`conformance.tolerance`), integers exactly.

`PageRules` checks production's page choices against the allocation rules a trace alone can check.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from conformance.tolerance import first_mismatch, tolerance
from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.packing import LaneInput

V, M = contract_pb2, manifest_pb2
WRITES = (V.ACCESS_WRITE, V.ACCESS_READ_WRITE)
ELEMENT_BYTES = {M.DTYPE_F32: 4, M.DTYPE_BF16: 2, M.DTYPE_F16: 2, M.DTYPE_I32: 4, M.DTYPE_I64: 8, M.DTYPE_U8: 1,
                 M.DTYPE_U32: 4, M.DTYPE_F64: 8}

Recorded = Mapping[str, tuple[tuple[int, ...], np.ndarray]]


@dataclass(frozen=True, slots=True)
class View:
    """One writable state view, in elements of its buffer (row `slot` is [start + slot * stride, + extent))."""

    buffer: str
    start: int
    stride: int
    extent: int

    @property
    def key(self) -> str:
        return f"state.{self.buffer}" + (f"@{self.start}" if self.start else "")

    def rows(self, flat: Any, slots: Sequence[int]) -> list[Any]:
        return [flat[self.start + slot * self.stride: self.start + slot * self.stride + self.extent] for slot in slots]


@dataclass(frozen=True, slots=True)
class StateSpec:
    """What the rounds of one core write (see the module docstring)."""

    page_tokens: int
    slots: int
    region: Mapping[str, tuple[str, tuple[int, ...]]]  # cache plane -> (history region, its layers)
    planes: Mapping[str, tuple[str, ...]]  # graph -> the cache planes it writes, in layer order
    views: Mapping[str, tuple[View, ...]]  # graph -> the state views it writes
    floats: frozenset[str]  # buffers holding floats
    # graph -> the continuation planes it writes (a RESTORATION graph's snapshots)
    continuation: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest) -> StateSpec:
        buffers = {b.name: b for b in manifest.buffers}
        cache = serving.model.cache
        region: dict[str, tuple[str, tuple[int, ...]]] = {}
        continuation_planes = {plane for history in cache.histories if history.kind == V.HISTORY_KIND_CONTINUATION
                               for plane in history.planes}
        for history in cache.histories:
            if history.kind == V.HISTORY_KIND_CONTINUATION:
                continue  # rows of snapshots, not records of positions: "continuation.<plane>"
            if history.kind == V.HISTORY_KIND_RECURRENT:
                continue  # a state row per slot, not records of positions: its state views ("state.<plane>")
            for plane in history.planes:
                region[plane] = (history.name, tuple(int(layer) for layer in history.layers))
        order = {plane: (min(layers, default=0), i) for i, (plane, (_, layers)) in enumerate(region.items())}
        planes: dict[str, tuple[str, ...]] = {}
        views: dict[str, tuple[View, ...]] = {}
        continuation: dict[str, tuple[str, ...]] = {}
        for graph in serving.model.graphs:
            written = {a.view.buffer for a in graph.state_accesses if a.access in WRITES}
            planes[graph.name] = tuple(sorted((p for p in written if p in region and p in buffers),
                                              key=lambda p: order[p]))
            own: list[View] = []
            for access in graph.state_accesses:
                descriptor = buffers.get(access.view.buffer)
                if access.access not in WRITES or descriptor is None or descriptor.role != M.BUFFER_ROLE_STATE:
                    continue
                if access.view.buffer in continuation_planes:
                    continue
                size = ELEMENT_BYTES.get(descriptor.dtype)
                view = access.view
                if size is None or view.byte_offset % size or view.row_stride % size or view.byte_extent % size:
                    continue  # not element-aligned: not a per-slot row this audit reads
                own.append(View(view.buffer, view.byte_offset // size, view.row_stride // size,
                                view.byte_extent // size))
            views[graph.name] = tuple(own)
            continuation[graph.name] = tuple(sorted(p for p in written if p in continuation_planes))
        floats = frozenset(b.name for b in manifest.buffers if b.dtype in (M.DTYPE_F32, M.DTYPE_BF16, M.DTYPE_F16,
                                                                           M.DTYPE_F64))
        return cls(int(cache.page_tokens), int(serving.max_concurrency), region, planes, views, floats,
                   continuation)

    def written(self, lanes: Sequence[LaneInput]) -> list[tuple[int, int, int, int]]:
        """(lane index, position, page, offset) of every cache record the lanes write, in order."""
        out = []
        t = self.page_tokens
        for index, lane in enumerate(lanes):
            positions = range(lane.consumed, lane.consumed + len(lane.tokens))
            if not lane.tokens and lane.restore_source >= 0:  # the whole page holding its endpoint
                positions = range(lane.consumed // t * t, lane.consumed // t * t + t)
            for position in positions:
                logical = position // t
                page = lane.page_ids[logical] if logical < len(lane.page_ids) else -1
                out.append((index, position, page, position % t))
        return out


def logits_rows(lanes: Sequence[LaneInput], rows_in_tensor: int, slots: int) -> tuple[int, ...]:
    """The logits rows of the sampling lanes: a row per physical slot when the tensor has one per slot
    (its rows are gathered by slot), else the lane's submission row."""
    by_slot = rows_in_tensor == slots
    return tuple(lane.slot if by_slot else i for i, lane in enumerate(lanes) if lane.samples)


def _host(value: Any) -> np.ndarray:
    from conformance.trace import to_numpy

    return to_numpy(value)


def readmitted_pages(copies: Sequence[Any]) -> tuple[int, ...]:
    """The device pages host-tier `copies` readmit into, in copy order, each once."""
    return tuple(dict.fromkeys(copy.page for copy in copies if copy.readmit))


def capture(spec: StateSpec, graph: str, lanes: Sequence[LaneInput], buffers: Mapping[str, Any], *,
            scratch: Mapping[str, Any] | None = None, logits: str | None = None, copies: Sequence[Any] = ()) -> dict:
    """What the round of `lanes` in `graph` wrote, read from `buffers` (and the logits `scratch[logits]`),
    and the pages its host-tier `copies` readmitted (no round writes a published page: they hold what
    the copies put there)."""
    out: dict[str, tuple[tuple[int, ...], np.ndarray]] = {}
    readmitted = readmitted_pages(copies)
    for plane in spec.region:
        if readmitted and plane in buffers:
            out[f"readmit.{plane}"] = (readmitted, _host(buffers[plane][list(readmitted)]))
    records = [(page, offset) for _, _, page, offset in spec.written(lanes) if page >= 0]
    for plane in spec.planes.get(graph, ()):
        if records and plane in buffers:
            pages, offsets = [p for p, _ in records], [o for _, o in records]
            out[f"cache.{plane}"] = (tuple(p * spec.page_tokens + o for p, o in records),
                                     _host(buffers[plane][pages, offsets]))
    if logits is not None and scratch is not None and logits in scratch:
        tensor = scratch[logits]
        rows = logits_rows(lanes, int(tensor.shape[0]), spec.slots)
        if rows:
            out[f"logits.{logits}"] = (rows, _host(tensor[list(rows)]))
    rows = snapshot_rows(lanes)
    for plane in spec.continuation.get(graph, ()):
        if rows and plane in buffers:
            out[f"continuation.{plane}"] = (rows, _host(buffers[plane][list(rows)]))
    slots = sorted({lane.slot for lane in lanes})
    for view in spec.views.get(graph, ()):
        if view.buffer in buffers and slots:
            flat = buffers[view.buffer].reshape(-1)
            out[view.key] = (tuple(slots), np.stack([_host(row) for row in view.rows(flat, slots)]))
    return out


# ------------------------------------------------------------------------------------------------ comparison

@dataclass(frozen=True, slots=True)
class Finding:
    """The first difference of a round's state (the audit makes it a `Divergence`)."""

    field: str  # "cache.<plane>", "logits", "state.<buffer>" or "pages"
    reference: object
    production: object
    lane: int | None  # the slot
    detail: str


def mismatch(reference: np.ndarray, production: np.ndarray, limit: float | None) -> tuple[int, ...] | None:
    """Index of the first element of one record outside `limit` x max(1, max |finite reference|) (None
    limit: exact), or None; NaN matches NaN, infinities themselves; other shapes give ()."""
    return first_mismatch(reference, production, limit, record=True)


def _element(index: tuple[int, ...]) -> str:
    if len(index) >= 2:
        return f"head {index[0]}, element {list(index[1:]) if len(index) > 2 else index[1]}"
    return f"element {index[0]}" if index else "the whole record"


def _value(array: np.ndarray, index: tuple[int, ...]) -> object:
    return np.asarray(array)[index].tolist() if index else list(np.asarray(array).shape)


def compare_cache(spec: StateSpec, graph: str, lanes: Sequence[LaneInput], reference: Mapping[str, np.ndarray],
                  recorded: Recorded, dtype: str) -> Finding | None:
    """The cache records the round wrote (see the module docstring)."""
    limit = tolerance(dtype).state
    written = [w for w in spec.written(lanes) if w[2] >= 0]
    if not written:
        return None
    expected = tuple(page * spec.page_tokens + offset for _, _, page, offset in written)
    for plane in spec.planes.get(graph, ()):
        key = f"cache.{plane}"
        name, layers = spec.region[plane]
        where = f"{plane} (region {name}, layer{'s' if len(layers) != 1 else ''} {', '.join(map(str, layers))})"
        if key not in recorded:
            return Finding(key, "written", "not recorded", None, f"{where}: production's records were not recorded")
        rows, values = recorded[key]
        if tuple(rows) != expected:
            return Finding(key, list(expected), list(rows), None,
                           f"{where}: the recorded records are not the ones the round's lanes write")
        ours = reference[plane][[p for _, _, p, _ in written], [o for _, _, _, o in written]]
        for i, (index, position, page, offset) in enumerate(written):
            at = mismatch(ours[i], values[i], limit)
            if at is not None:
                slot = lanes[index].slot
                return Finding(key, _value(ours[i], at), _value(values[i], at), slot,
                               f"slot {slot}: {where} page {page} position {position} (offset {offset}), "
                               f"{_element(at)} differs beyond the {dtype} state tolerance {limit:g}")
    return None


def snapshot_rows(lanes: Sequence[LaneInput]) -> tuple[int, ...]:
    """The continuation rows the lanes snapshot into, in lane order."""
    return tuple(lane.snapshot_destination for lane in lanes if not lane.tokens and lane.snapshot_destination >= 0)


def compare_continuation(spec: StateSpec, graph: str, lanes: Sequence[LaneInput],
                         reference: Mapping[str, np.ndarray], recorded: Recorded, dtype: str) -> Finding | None:
    """The continuation rows a RESTORATION round's lanes snapshotted into."""
    rows = snapshot_rows(lanes)
    limit = tolerance(dtype).state
    for plane in spec.continuation.get(graph, ()):
        key = f"continuation.{plane}"
        if not rows:
            return None
        if key not in recorded:
            return Finding(key, "written", "not recorded", None, f"{plane}: production's rows were not recorded")
        recorded_rows, values = recorded[key]
        if tuple(recorded_rows) != rows:
            return Finding(key, list(rows), list(recorded_rows), None,
                           f"{plane}: the recorded rows are not the ones the round's lanes snapshot into")
        for lane, row, value in zip([lane for lane in lanes if lane.snapshot_destination >= 0], rows, values,
                                    strict=True):
            at = mismatch(np.asarray(reference[plane][row]), value, limit)
            if at is not None:
                return Finding(key, _value(np.asarray(reference[plane][row]), at), _value(value, at), lane.slot,
                               f"slot {lane.slot}: continuation row {row} of {plane} (its endpoint "
                               f"{lane.consumed}), {_element(at)} differs beyond the {dtype} state tolerance "
                               f"{limit:g}")
    return None


def compare_readmitted(spec: StateSpec, copies: Sequence[Any], reference: Mapping[str, np.ndarray],
                       recorded: Recorded, dtype: str) -> Finding | None:
    """The pages the round's host-tier copies readmitted, every record of every cache plane, against
    the reference's pages after the same copies (what it computed and offloaded itself). Skipped for a
    round recorded without them (traces before readmissions were recorded)."""
    pages = readmitted_pages(copies)
    if not pages:
        return None
    limit = tolerance(dtype).state
    source = {copy.page: copy.host_page for copy in copies if copy.readmit}  # the last copy into a page counts
    for plane in spec.region:
        key = f"readmit.{plane}"
        if key not in recorded:
            continue
        rows, values = recorded[key]
        if tuple(rows) != pages:
            return Finding(key, list(pages), list(rows), None,
                           f"{plane}: the recorded pages are not the ones the round's copies readmit into")
        name, layers = spec.region[plane]
        for page, value in zip(pages, values, strict=True):
            ours = np.asarray(reference[plane][page])
            for offset in range(ours.shape[0]):
                at = mismatch(ours[offset], value[offset], limit)
                if at is not None:
                    return Finding(key, _value(ours[offset], at), _value(value[offset], at), None,
                                   f"{plane} (region {name}, layers {', '.join(map(str, layers))}): page {page} "
                                   f"readmitted from host page {source[page]}, offset {offset}, {_element(at)} "
                                   f"differs from the checkpoint offloaded there beyond the {dtype} state "
                                   f"tolerance {limit:g}")
    return None


def compare_logits(spec: StateSpec, lanes: Sequence[LaneInput], reference: np.ndarray | None, recorded: Recorded,
                   dtype: str) -> Finding | None:
    """The logits rows of the sampling lanes, when both runtimes kept them."""
    found = [key for key in recorded if key.startswith("logits.")]
    if reference is None or not found:
        return None
    rows, values = recorded[found[0]]
    expected = logits_rows(lanes, int(np.asarray(reference).shape[0]), spec.slots)
    if tuple(rows) != expected:
        return Finding("logits", list(expected), list(rows), None,
                       "the recorded logits rows are not the sampling lanes' rows")
    limit = tolerance(dtype).state
    sampling = [lane for lane in lanes if lane.samples]
    for lane, row, production in zip(sampling, rows, values, strict=True):
        at = mismatch(np.asarray(reference)[row], production, limit)
        if at is not None:
            return Finding("logits", _value(np.asarray(reference)[row], at), _value(production, at), lane.slot,
                           f"slot {lane.slot}: logits row {row}, token id {at[0] if at else '?'} differs beyond "
                           f"the {dtype} state tolerance {limit:g}")
    return None


def compare_views(spec: StateSpec, graph: str, lanes: Sequence[LaneInput], reference: Mapping[str, np.ndarray],
                  recorded: Recorded, dtype: str) -> Finding | None:
    """The state rows (e.g. the device-owned pending token) of the lanes' slots."""
    slots = sorted({lane.slot for lane in lanes})
    for view in spec.views.get(graph, ()):
        if view.key not in recorded or view.buffer not in reference:
            continue
        rows, values = recorded[view.key]
        ours = np.stack(view.rows(np.asarray(reference[view.buffer]).reshape(-1), slots)) if slots else values
        limit = tolerance(dtype).state if view.buffer in spec.floats else None
        for slot, row, mine, theirs in zip(slots, rows, ours, values, strict=False):
            at = mismatch(mine, theirs, limit) if row == slot else ()
            if at is not None:
                return Finding(view.key, _value(mine, at), _value(theirs, at), slot,
                               f"slot {slot}: state row of {view.buffer} (elements {view.start + slot * view.stride}"
                               f"..{view.start + slot * view.stride + view.extent - 1}), {_element(at)} differs")
    return None


# ------------------------------------------------------------------------------------------------ page rules

class PageRules:
    """Production's page choices against the allocation rules a trace alone can check:

    1. every page id a lane holds lies within the physical page count;
    2. no page a lane writes in a round is held by another lane of that round;
    3. no lane writes a page another request still holds: a residency (slot, generation) holds the
       pages of its page ids from the first round it lists them; a write by another residency after
       that, followed by a round where the holder still lists the page, is a violation (a residency's
       pages only grow, so it held the page throughout);
    4. resources are retained through their fence: a round submitted while the previous one was
       outstanding (`outstanding` 2) writes no page a lane of that previous round held for another
       residency (a request that ends, is cancelled or is preempted, a snapshot lane included, keeps
       its pages until its round completes).

    A RESTORATION lane that restores a snapshot writes the page holding its endpoint.
    """

    def __init__(self, page_tokens: int, pages: int) -> None:
        self.page_tokens = page_tokens
        self.pages = pages
        self._held: dict[int, dict[tuple[int, int], int]] = {}  # page -> residency -> first round held
        self._writes: dict[int, dict[tuple[int, int], int]] = {}  # page -> writer residency -> last round
        self._previous: tuple[int | None, Sequence[LaneInput]] = (None, ())  # the last round's sequence, lanes

    def check(self, round_number: int, lanes: Sequence[LaneInput], *, sequence: int | None = None,
              outstanding: int | None = None) -> Finding | None:
        found = self._check(round_number, lanes)
        previous_sequence, previous = self._previous
        self._previous = (sequence, lanes)
        if found is None and outstanding == 2 and sequence is not None and previous_sequence == sequence - 1:
            found = self._fenced(round_number, lanes, previous)
        return found

    def _fenced(self, round_number: int, lanes: Sequence[LaneInput],
                previous: Sequence[LaneInput]) -> Finding | None:
        held = {page: (lane.slot, lane.generation) for lane in previous for page in lane.page_ids}
        for lane in lanes:
            for page in sorted(self._written_pages(lane)):
                holder = held.get(page)
                if holder is not None and holder != (lane.slot, lane.generation):
                    return Finding("pages", f"page {page} retained by slot {holder[0]} through its fence",
                                   f"written by slot {lane.slot}", lane.slot,
                                   f"slot {lane.slot} (generation {lane.generation}) writes page {page} in round "
                                   f"{round_number}, submitted while round {round_number - 1}, whose slot "
                                   f"{holder[0]} (generation {holder[1]}) held that page, was still outstanding")
        return None

    def _check(self, round_number: int, lanes: Sequence[LaneInput]) -> Finding | None:
        for lane in lanes:
            bad = [p for p in lane.page_ids if not 0 <= p < self.pages]
            if bad:
                return Finding("pages", f"ids in [0, {self.pages})", list(lane.page_ids), lane.slot,
                               f"slot {lane.slot}: page {bad[0]} lies outside the {self.pages} physical pages")
        writes = {i: self._written_pages(lane) for i, lane in enumerate(lanes)}
        for i, lane in enumerate(lanes):
            for j, other in enumerate(lanes):
                shared = sorted(writes[i] & set(other.page_ids)) if i != j else []
                if shared:
                    return Finding("pages", "a page written by one lane alone", shared[0], lane.slot,
                                   f"slot {lane.slot} writes page {shared[0]}, which slot {other.slot} of the same "
                                   "round also holds")
        for lane in lanes:
            me = (lane.slot, lane.generation)
            for page in lane.page_ids:
                since = self._held.setdefault(page, {}).setdefault(me, round_number)
                for writer, when in self._writes.get(page, {}).items():
                    if writer != me and since < when < round_number:
                        return Finding("pages", f"page {page} private to slot {lane.slot}", f"written by slot "
                                       f"{writer[0]}", lane.slot,
                                       f"slot {lane.slot} (generation {lane.generation}) holds page {page} since "
                                       f"round {since}, but slot {writer[0]} (generation {writer[1]}) wrote it in "
                                       f"round {when}")
        for i, lane in enumerate(lanes):
            for page in writes[i]:
                self._writes.setdefault(page, {})[(lane.slot, lane.generation)] = round_number
        return None

    def _written_pages(self, lane: LaneInput) -> set[int]:
        t = self.page_tokens
        if not lane.tokens and lane.restore_source >= 0:  # a restored snapshot's page
            logical = lane.consumed // t
            return {lane.page_ids[logical]} if logical < len(lane.page_ids) else set()
        logical = range(lane.consumed // t, -(-(lane.consumed + len(lane.tokens)) // t)) if lane.tokens else ()
        return {lane.page_ids[i] for i in logical if i < len(lane.page_ids)}
