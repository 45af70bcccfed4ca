"""Level 2, trace audit (host side, NumPy only): the reference replays production's submissions.

    result = audit_trace(core, header, records, case="trace/pressure")

A fresh `ReferenceEngine` on the same core (with production's physical page count) runs every
recorded round through its own `run_round`, in trace order, with the very lanes production
submitted. Each round is compared in this order, and the first disagreement ends the case:

1. page choices (`pages`): production's pages against the allocation rules the trace alone can
   check (`conformance.state.PageRules`: ids within the physical pages, no page written by one lane
   and held by another of the round, no page written while another request holds it, none written
   while the previous round that held it for another request is outstanding: its fence);
2. the submission itself: the reference must accept it (pages cover every row, capacities hold);
3. transport: every destination the graph binds, on the rows the round addresses, exactly as the
   reference's packing of the same lanes writes them (`transport.<destination>`);
4. lane order: production's rows must answer the lanes in submission order (`lane_order`, when its
   rows are the reference's rows of other lanes);
5. the cache records the round wrote, plane by plane in layer order (`cache.<plane>`, the detail
   naming region, layer, page, position and head; a RESTORATION lane restoring a snapshot writes the
   whole page holding its endpoint), the continuation rows a RESTORATION round snapshotted into
   (`continuation.<plane>`), then the logits rows of the sampling lanes
   (`logits`), within the precision's state tolerance (`conformance.state`);
6. each lane's completion row, integer fields exactly: status, generation, offer and accepted
   drafts (a speculative lane's allocation and acceptance; -1 elsewhere), emitted,
   consumed_endpoint, draft_cursor, model_reserved, frame_index (the frame it was submitted in),
   submission_sequence (the sequence the transport wrote), then a speculative lane's emitted ids
   (`sampled_ids`) and sampled_id (when emitted);
7. the state rows the round wrote (`state.<buffer>`: the device-owned pending token), after
   production's samples were adopted (below);
8. production's executor must not have rejected a round the reference accepts identically (`error`).

A round that carried host-tier copies (`copies`: evicted checkpoints offloaded, host hits readmitted)
has them applied to the reference's own cache pages and a host tier of its own first, in order, as
production's executor applied them: a readmitted page then holds what the reference computed and
offloaded, so every later round reading it compares like any other. Before the round is replayed,
every page production readmitted (recorded after its copies: `readmit.<plane>`) is compared, every
record of every cache plane, with the reference's page after the same copies (`readmit.<plane>`,
the detail naming the page, the host page and the position); a readmission of a host page no offload
wrote is a `readmit` divergence.

Steps 5 and 7 need the round's recorded state (trace version 2); a round recorded without it
(version 1) skips them, and the logits only where production's plan exposed its sampled logits.

A sampled id that differs is a numeric tie when the reference's own draw, with its logits moved by
at most the core precision's tie tolerance, picks production's id (`conformance.draw`: the margin is
the smallest such move; for a greedy row, half the winning logit margin), the margin is not zero (an
exact tie is the rule's to break: the lowest id) and, for a greedy row whose logits production
recorded, the rule applied to production's own logits picks production's id (else its sampler broke
the rule): the tie is reported with its margin and the replay continues with production's token (later lanes carry production's tokens,
so adopting it is automatic). Device-owned pending tokens (-1 in a lane) are the lane's previous
production sample (a speculative lane's last emitted id); on a core whose graphs keep the pending
token in a state view, production's sample is also written into the reference's state row of the
slot after every round, so the replay reads what production read there (after an adopted tie as
well). A speculative round has no tie judgement yet: a proposal or an acceptance that flips on a
numeric near-tie is reported as a divergence of its offer, accepted drafts or emitted ids.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from conformance.draw import DrawInputs, is_draw_tie, sampling_site
from conformance.report import CaseResult, Divergence
from conformance.state import (
    Finding,
    PageRules,
    StateSpec,
    compare_cache,
    compare_continuation,
    compare_logits,
    compare_readmitted,
    compare_views,
)
from conformance.trace import RoundRecord, TraceError, TraceHeader, addressed_rows
from helios.core.source import CoreSource
from helios.engine.sequence import DEVICE_PENDING
from helios.errors import HeliosError
from helios.proto import manifest_pb2
from helios.runtime.completion import Completion, transport_sequence
from helios.runtime.packing import LaneInput, continuation_planes

M = manifest_pb2
# Speculative rows add their offer (the allocation) and accepted drafts; other rows report -1 for both.
INTEGER_FIELDS = ("status", "generation", "offer", "accepted_drafts", "emitted", "consumed_endpoint", "draft_cursor",
                  "model_reserved")
DTYPE_NAMES = {M.DTYPE_F32: "f32", M.DTYPE_BF16: "bf16", M.DTYPE_F16: "f16"}


def core_dtype(manifest: manifest_pb2.ExecutionManifest) -> str:
    """The activation dtype a core stores (its cache planes'): the precision of its tolerances."""
    for buffer in manifest.buffers:
        if buffer.role == M.BUFFER_ROLE_CACHE and buffer.dtype in DTYPE_NAMES:
            return DTYPE_NAMES[buffer.dtype]
    return "f32"


def _row_values(array: np.ndarray, rows: tuple[int, ...]) -> np.ndarray:
    return array.reshape(-1) if not rows else array[list(rows)]


class _Replay:
    def __init__(self, core: CoreSource, header: TraceHeader, case: str, dtype: str) -> None:
        from helios.reference.engine import ReferenceEngine

        serving = core.contract
        if header.served_id != serving.served_id or header.cache_identity != serving.cache_identity:
            raise TraceError(f"the trace was recorded on {header.served_id!r} ({header.cache_identity}); "
                             f"this core is {serving.served_id!r} ({serving.cache_identity})")
        self.site = sampling_site(core)
        self.engine = ReferenceEngine.load(core, pages=header.pages, keep=self.site.inputs if self.site else ())
        self.case = case
        self.dtype = dtype
        self.slots = serving.max_concurrency
        self.last: dict[int, int] = {}  # slot -> production's last sampled id (device-owned pending tokens)
        self.ties: list[Divergence] = []
        self.spec = StateSpec.of(serving, core.manifest)
        self.pages = PageRules(self.spec.page_tokens, header.pages)
        self.cache_planes = [b.name for b in core.manifest.buffers if b.role == M.BUFFER_ROLE_CACHE]
        self.continuation_of = continuation_planes(serving)  # cache plane -> its continuation plane
        self.host: dict[int, list[dict[str, np.ndarray]]] = {}  # host page -> per rank, plane -> page copy
        # graph -> (state buffer, byte offset, row stride) of its device-owned pending token
        self.pending_state = {g.name: (g.pending_token_state.buffer, g.pending_token_state.byte_offset,
                                       g.pending_token_state.row_stride)
                              for g in serving.model.graphs if g.HasField("pending_token_state")}

    def lanes(self, record: RoundRecord) -> list[LaneInput]:
        out = []
        for lane in record.lanes:
            if lane.pending_token == DEVICE_PENDING:
                lane = replace(lane, tokens=(*lane.tokens[:-1], self.last.get(lane.slot, DEVICE_PENDING)))
            out.append(lane)
        return out

    def divergence(self, record: RoundRecord, field: str, reference: object, production: object, *,
                   lane: int | None = None, margin: float | None = None, detail: str = "") -> Divergence:
        return Divergence(self.case, field, reference, production, round=record.round, lane=lane, margin=margin,
                          detail=f"round {record.round} ({record.graph}): {detail}" if detail else "")

    def finding(self, record: RoundRecord, found: Finding | None) -> Divergence | None:
        return None if found is None else self.divergence(record, found.field, found.reference, found.production,
                                                          lane=found.lane, detail=found.detail)

    def round(self, record: RoundRecord) -> Divergence | None:
        lanes = self.lanes(record)
        ruled = self.finding(record, self.pages.check(record.round, record.lanes, sequence=record.sequence,
                                                      outstanding=record.outstanding))
        if ruled is not None:
            return ruled
        try:
            self._copy_pages(record)
        except KeyError as error:
            return self.divergence(record, "readmit", "offloaded", f"host page {error} never offloaded",
                                   detail="a host-tier readmission reads a host page no offload wrote")
        if record.state is not None:
            readmitted = self.finding(record, compare_readmitted(self.spec, record.copies, self.engine.buffers,
                                                                 record.state, self.dtype))
            if readmitted is not None:
                return readmitted
        try:
            reference = self.engine.run_round(record.graph, lanes)
        except (HeliosError, KeyError, IndexError) as error:
            return self.divergence(record, "submission", f"rejected: {type(error).__name__}: {error}", "submitted",
                                   detail="the reference cannot run the round production submitted")
        kept = self.engine.kept.pop() if self.engine.kept else {}
        self.engine.kept.clear()
        logits = kept.get(self.site.inputs[0]) if self.site else None
        state = record.state
        found = self._transport(record, lanes) or self._order(record, reference)
        if found is None and state is not None:
            found = (self.finding(record, compare_cache(self.spec, record.graph, lanes, self.engine.buffers, state,
                                                        self.dtype))
                     or self.finding(record, compare_continuation(self.spec, record.graph, lanes,
                                                                  self.engine.buffers, state, self.dtype))
                     or self.finding(record, compare_logits(self.spec, lanes, logits, state, self.dtype)))
        found = found or self._rows(record, lanes, reference, kept)
        adopted = found is None
        for lane, row in zip(lanes, record.rows, strict=False):
            if row.emitted:  # the last emitted id is the slot's next pending token
                self.last[lane.slot] = row.tokens()[-1]
                self._adopt_pending(record.graph, lane.slot, row.tokens()[-1])
        if adopted and state is not None:
            found = self.finding(record, compare_views(self.spec, record.graph, lanes, self.engine.buffers, state,
                                                       self.dtype))
        if found is None and record.rank_states:
            found = self._ranks(record, lanes)
        if found is None and record.error is not None:
            found = self.divergence(record, "error", "accepted", record.error,
                                    detail="production rejected a completion the reference produces identically")
        return found

    def _ranks(self, record: RoundRecord, lanes: list[LaneInput]) -> Divergence | None:
        """Production ranks: what each peer rank's round wrote into its own cache, continuation and
        state rows against the reference's lockstep rank of the same index."""
        ranks = self.engine.executor.rank_buffers
        if len(record.rank_states) != len(ranks) - 1:
            return self.divergence(record, "ranks", len(ranks), len(record.rank_states) + 1,
                                   detail="production recorded another number of ranks than the reference runs")
        for rank, state in enumerate(record.rank_states, start=1):
            buffers = ranks[rank]
            found = (compare_cache(self.spec, record.graph, lanes, buffers, state, self.dtype)
                     or compare_continuation(self.spec, record.graph, lanes, buffers, state, self.dtype)
                     or compare_views(self.spec, record.graph, lanes, buffers, state, self.dtype))
            if found is not None:
                return self.divergence(record, f"rank{rank}.{found.field}", found.reference, found.production,
                                       lane=found.lane, detail=f"rank {rank}: {found.detail}")
        return None

    def _copy_pages(self, record: RoundRecord) -> None:
        """The round's host-tier copies, in order, on the reference's pages (a readmission of a host
        page the reference never offloaded is a KeyError: the submission is rejected)."""
        ranks = self.engine.executor.rank_buffers
        for copy in record.copies:
            if copy.readmit:
                for buffers, held in zip(ranks, self.host[copy.host_page], strict=True):
                    for name in self.cache_planes:
                        buffers[name][copy.page] = held[name]
            else:  # a continuation row offloaded: each cache plane's page record from its continuation plane
                self.host[copy.host_page] = [
                    {name: buffers[self.continuation_of[name] if copy.continuation else name][copy.page].copy()
                     for name in self.cache_planes} for buffers in ranks]

    def _adopt_pending(self, graph: str, slot: int, token: int) -> None:
        """Production's sample becomes the slot's device-owned pending token on the reference too
        (on every rank of a core of several: each holds its own pending-token state)."""
        if graph not in self.pending_state:
            return
        buffer, offset, stride = self.pending_state[graph]
        start = offset + slot * stride
        for buffers in getattr(self.engine.executor, "rank_buffers", None) or (self.engine.buffers,):
            raw = buffers[buffer].reshape(-1).view(np.uint8)
            raw[start:start + 4] = np.frombuffer(np.int32(token).tobytes(), dtype=np.uint8)

    def _transport(self, record: RoundRecord, lanes: list[LaneInput]) -> Divergence | None:
        packing = self.engine.graphs[record.graph].packing
        expected = addressed_rows(packing, lanes)
        for name, rows in expected.items():
            if name not in record.transport:
                return self.divergence(record, f"transport.{name}", "bound", "not recorded")
            recorded_rows, production = record.transport[name]
            reference = _row_values(np.asarray(self.engine.buffers[name]), rows or ())
            if tuple(recorded_rows) != tuple(rows or ()) or production.shape != reference.shape:
                return self.divergence(record, f"transport.{name}", list(rows or ()), list(recorded_rows),
                                       detail=f"{name}: recorded rows differ from the rows the round addresses")
            bad = np.argwhere(reference != production)
            if bad.size:
                index = int(bad[0][0])
                lane = (rows[index] if rows else None)
                return self.divergence(record, f"transport.{name}", reference[index].tolist(),
                                       production[index].tolist(), lane=lane,
                                       detail=f"{name} row {lane} differs from the shared packing of the same lanes")
        return None

    def _order(self, record: RoundRecord, reference: list[Completion]) -> Divergence | None:
        key = lambda row: (row.generation, row.emitted, row.consumed_endpoint,  # noqa: E731
                           row.sampled_id if row.emitted else None)
        produced = [key(row) for row in record.rows]
        expected = [key(row) for row in reference]
        if len(record.rows) != len(reference):
            return self.divergence(record, "lane_order", len(reference), len(record.rows),
                                   detail="production returned a different number of completion rows")
        if produced != expected and sorted(produced) == sorted(expected) and len(set(expected)) == len(expected):
            slots = [lane.slot for lane in record.lanes]
            answered = [slots[expected.index(k)] for k in produced]
            return self.divergence(record, "lane_order", slots, answered,
                                   detail="completion rows answer the lanes' slots in another order")
        return None

    def _rows(self, record: RoundRecord, lanes: list[LaneInput], reference: list[Completion],
              kept: dict) -> Divergence | None:
        for index, (lane, ref, prod) in enumerate(zip(lanes, reference, record.rows, strict=True)):
            for name in INTEGER_FIELDS:
                if getattr(ref, name) != getattr(prod, name):
                    return self.divergence(record, name, getattr(ref, name), getattr(prod, name), lane=lane.slot,
                                           detail=f"slot {lane.slot}: {name} differs")
            if prod.frame_index != record.frame:
                return self.divergence(record, "frame_index", record.frame, prod.frame_index, lane=lane.slot,
                                       detail="the row answers another execution frame")
            if record.sequence is not None and prod.submission_sequence != transport_sequence(record.sequence):
                return self.divergence(record, "submission_sequence", transport_sequence(record.sequence),
                                       prod.submission_sequence,
                                       lane=lane.slot, detail="the row answers another submission")
            if ref.sampled_ids and ref.tokens() != prod.tokens():  # a speculative lane's accepted run
                return self.divergence(record, "sampled_ids", list(ref.tokens()), list(prod.tokens()),
                                       lane=lane.slot, detail=f"slot {lane.slot}: the emitted ids differ")
            if ref.emitted and ref.sampled_id != prod.sampled_id:
                logits = kept.get(self.site.inputs[0]) if self.site else None
                if logits is None:
                    return self.divergence(record, "sampled_id", ref.sampled_id, prod.sampled_id, lane=lane.slot)
                # NOTE: rows of the sampled logits are physical slots when there is one per slot (as
                # the completion record's), else submission rows.
                row = lane.slot if logits.shape[0] == self.slots else index
                draw = self.site.row(kept, row)
                tie, margin = (False, None) if draw is None else is_draw_tie(draw, ref.sampled_id, prod.sampled_id,
                                                                             self.dtype)
                item = self.divergence(record, "sampled_id", ref.sampled_id, prod.sampled_id, lane=lane.slot,
                                       margin=margin, detail=f"slot {lane.slot}: sampled ids differ"
                                       + (" on an exact tie: the rule picks the lowest id" if margin == 0 else ""))
                if not tie:
                    return item
                own = self._own_draw(record, draw, row)
                if own is not None and own != prod.sampled_id:
                    return self.divergence(record, "sampled_id", own, prod.sampled_id, lane=lane.slot, margin=margin,
                                           detail=f"slot {lane.slot}: the sampling rule on production's own logits "
                                           f"picks {own}, production sampled {prod.sampled_id}")
                self.ties.append(item)
        return None


    def _own_draw(self, record: RoundRecord, draw: DrawInputs, row: int) -> int | None:
        """The greedy rule's pick on production's recorded logits row `row` (None: not recorded, or a
        sampled row, whose weights go through `exp`, which libraries round differently)."""
        recorded = [values for key, values in (record.state or {}).items() if key.startswith("logits.")]
        if not draw.greedy or not recorded or row not in recorded[0][0]:
            return None
        rows, values = recorded[0]
        return draw.draw(np.asarray(values[list(rows).index(row)], dtype=np.float32))


def audit_trace(core: CoreSource, header: TraceHeader, records: Iterable[RoundRecord], *, case: str,
                dtype: str | None = None) -> CaseResult:
    """Replay `records` on the reference and return the case's verdict (see the module docstring)."""
    replay = _Replay(core, header, case, dtype or core_dtype(core.manifest))
    for record in records:
        found = replay.round(record)
        if found is not None:
            return CaseResult(case, "divergence", found, tuple(replay.ties))
    return CaseResult(case, "numeric tie" if replay.ties else "pass", None, tuple(replay.ties))
