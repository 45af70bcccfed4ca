"""The submission trace (host side, NumPy only): what production ran, round by round, in a compact file.

    recorder = recorder_for(executor, serving, manifest, sink=TraceWriter(path))   # wraps the executor
    runtime = BatchingRuntime.for_executor(recorder, ...)                           # serves as usual
    for record in read_trace(path): ...

`TraceRecorder` has the executor seam (`submit(plan)`, `collect(plan) -> rows`) and forwards every
round to the executor it wraps; it records the graph, the frame, the cohort (each lane's
`LaneInput`), the transport values the round actually ran with (the addressed rows of every
destination the graph binds, read back from the executor's buffers right after the submission), the
submission sequence, the round's state (what it wrote: the cache records of the positions its lanes
consumed in every writable plane, its writable state rows and the logits rows it sampled from, read
right after the submission as well: `conformance.state`) and the completion rows the host received
(unvalidated: the scheduler validates them after the recorder). When the executor fails a round as it is collected (it raises), the rows
are read from the frame's read-back (or the completion buffers) instead and the error is recorded;
the error is then re-raised unchanged.

File format: JSON lines. The first line is the header (`format`, `version`, the core's served id and
cache identity, physical pages, request slots); each further line is one round:

    {"round": n, "graph": name, "frame": f, "lanes": [lane...], "transport": {dest: array...},
     "state": {"cache.<plane>" | "logits.<tensor>" | "state.<buffer>" | "readmit.<plane>": array...},
     "rows": [completion...], "error": null | "ExceptionClass: message", "outstanding": k,
     "copies": [[readmit, page, host_page(, 1)]...]}      # only when the round carried host-tier copies
                                                          # (a 4th entry 1: from continuation row `page`)

Version 2 added "state"; a version 1 trace is still read (its rounds carry no state, so the audit
compares transport and completion rows only). "outstanding" (rounds outstanding right after the
submission, itself included) came later within version 2; a round without it skips the page rule
that needs it (resources retained through their fence).

Arrays are {"dtype", "shape", "rows", "data"}: `rows` the leading indices recorded (physical slots,
or a prefix), `data` the zlib-compressed little-endian bytes in base64 (histograms are mostly zeros).
"""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import numpy as np

from helios.errors import HeliosError
from helios.proto import contract_pb2, manifest_pb2
from helios.runtime.completion import Completion, CompletionRows, completion_rows
from helios.runtime.lanes import ImageSubmission
from helios.runtime.packing import GraphPacking, LaneInput
from helios.runtime.request import SamplingParams
from helios.runtime.rounds import PageCopy, RoundPlan

FORMAT = "helios-trace"
VERSION = 2
READABLE = (1, 2)  # versions this reader understands
V, M = contract_pb2, manifest_pb2


class TraceError(HeliosError):
    """A trace file is malformed, of an unknown version, or recorded on another core."""


@dataclass(frozen=True, slots=True)
class TraceHeader:
    served_id: str  # the core's served identifier
    cache_identity: str  # the contract's cache identity (same core, same weights)
    pages: int  # physical cache pages production ran with
    slots: int  # request slots (physical request rows)

    def __post_init__(self) -> None:
        if self.pages < 1 or self.slots < 1:
            raise TraceError(f"trace header: pages and slots must be >= 1, got {self.pages}, {self.slots}")


@dataclass(frozen=True, slots=True)
class RoundRecord:
    """One submission as production ran it."""

    round: int  # 1-based index in the trace
    graph: str
    frame: int  # the execution frame it was submitted in
    lanes: tuple[LaneInput, ...]  # submission order
    transport: Mapping[str, tuple[tuple[int, ...], np.ndarray]]  # destination -> (recorded rows, values)
    rows: tuple[Completion, ...]  # the completion rows, lane order
    sequence: int | None = None  # the submission sequence the transport wrote (None: not exposed)
    error: str | None = None  # the executor's own rejection of its completion, if any
    # what the round wrote (conformance.state), as recorded rows and values; None: not recorded
    state: Mapping[str, tuple[tuple[int, ...], np.ndarray]] | None = None
    # rounds outstanding right after its submission, itself included (RoundPlan.outstanding); None:
    # not recorded (traces before snapshots)
    outstanding: int | None = None
    # the host-tier copies applied before the round (RoundPlan.page_copies), in order; the replay
    # applies them to the reference's pages and host tier the same way
    copies: tuple[PageCopy, ...] = ()
    # production ranks: what the round wrote on ranks 1 .. N-1 (as `state`), read from each peer's own
    # buffers; recorded in memory for the audit (`helios conform`), not written to trace files
    rank_states: tuple[Mapping[str, tuple[tuple[int, ...], np.ndarray]], ...] = ()


# ------------------------------------------------------------------------------------------------ encoding

def _array(rows: Sequence[int], values: np.ndarray) -> dict:
    values = np.ascontiguousarray(values)
    data = base64.b64encode(zlib.compress(values.astype(values.dtype.newbyteorder("<")).tobytes(), 6))
    return {"dtype": values.dtype.str.lstrip("<>|="), "shape": list(values.shape), "rows": list(rows),
            "data": data.decode("ascii")}


def _from_array(item: dict) -> tuple[tuple[int, ...], np.ndarray]:
    raw = zlib.decompress(base64.b64decode(item["data"]))
    values = np.frombuffer(raw, dtype=np.dtype(item["dtype"]).newbyteorder("<")).reshape(item["shape"])
    return tuple(int(r) for r in item["rows"]), values.astype(np.dtype(item["dtype"]))


def lane_to_json(lane: LaneInput) -> dict:
    out = {name: getattr(lane, name) for name in LaneInput.__slots__}
    out["sampling"] = asdict(lane.sampling)
    for name in ("tokens", "page_ids", "eos_ids", "prompt_token_ids", "copied", "image_context", "history"):
        out[name] = list(out[name])
    if lane.image is not None:
        out["image"] = {"tensors": [{"name": name, "dtype": str(array.dtype), "shape": list(array.shape),
                                     "values": array.ravel().tolist()} for name, array in lane.image.tensors],
                        "feature_rows": [int(r) for r in lane.image.feature_rows]}
    if lane.grammar_mask is not None:
        out["grammar_mask"] = list(lane.grammar_mask)
    if lane.candidate_masks is not None:
        out["candidate_masks"] = [list(mask) for mask in lane.candidate_masks]
    return out


def lane_from_json(data: dict) -> LaneInput:
    values = dict(data)
    values["sampling"] = SamplingParams(**values["sampling"])
    for name in ("tokens", "page_ids", "eos_ids", "prompt_token_ids", "copied", "image_context", "history"):
        if name in values:  # copied proposals, image context, Engram history: recorded since they exist
            values[name] = tuple(int(v) for v in values[name])
    if values.get("image") is not None:
        image = values["image"]
        values["image"] = ImageSubmission(
            tensors=tuple((t["name"], np.asarray(t["values"], dtype=np.dtype(t["dtype"])).reshape(t["shape"]))
                          for t in image["tensors"]),
            feature_rows=np.asarray(image["feature_rows"], dtype=np.int32))
    if values.get("grammar_mask") is not None:
        values["grammar_mask"] = tuple(int(v) for v in values["grammar_mask"])
    if values.get("candidate_masks") is not None:  # per-position masks: recorded since constrained speculation
        values["candidate_masks"] = tuple(tuple(int(v) for v in mask) for mask in values["candidate_masks"])
    return LaneInput(**values)


def record_to_json(record: RoundRecord) -> dict:
    return {"round": record.round, "graph": record.graph, "frame": record.frame,
            "lanes": [lane_to_json(lane) for lane in record.lanes],
            "transport": {name: _array(rows, values) for name, (rows, values) in record.transport.items()},
            "state": (None if record.state is None else
                      {name: _array(rows, values) for name, (rows, values) in record.state.items()}),
            "rows": [asdict(row) for row in record.rows], "sequence": record.sequence, "error": record.error,
            "outstanding": record.outstanding,
            **({"copies": [[int(c.readmit), c.page, c.host_page, *([1] if c.continuation else [])]
                           for c in record.copies]} if record.copies else {})}


def record_from_json(data: dict) -> RoundRecord:
    return RoundRecord(round=int(data["round"]), graph=str(data["graph"]), frame=int(data["frame"]),
                       lanes=tuple(lane_from_json(lane) for lane in data["lanes"]),
                       transport={name: _from_array(item) for name, item in data["transport"].items()},
                       rows=tuple(Completion(**row) for row in data["rows"]), sequence=data.get("sequence"),
                       error=data.get("error"), outstanding=data.get("outstanding"),
                       copies=tuple(PageCopy(bool(c[0]), int(c[1]), int(c[2]), bool(c[3]) if len(c) > 3 else False)
                                    for c in data.get("copies", ())),
                       state=(None if data.get("state") is None else
                              {name: _from_array(item) for name, item in data["state"].items()}))


class TraceWriter:
    """Appends a header and round records to a JSON-lines file (or any text stream)."""

    def __init__(self, target: str | Path | IO[str]) -> None:
        self._own = not hasattr(target, "write")
        self._stream: IO[str] = open(target, "w", encoding="utf-8") if self._own else target  # type: ignore[arg-type]  # noqa: SIM115

    def header(self, header: TraceHeader) -> None:
        self._line({"format": FORMAT, "version": VERSION, **asdict(header)})

    def round(self, record: RoundRecord) -> None:
        self._line(record_to_json(record))

    def _line(self, data: dict) -> None:
        self._stream.write(json.dumps(data, separators=(",", ":")) + "\n")
        self._stream.flush()

    def close(self) -> None:
        if self._own:
            self._stream.close()


def read_trace(source: str | Path | IO[str]) -> tuple[TraceHeader, Iterator[RoundRecord]]:
    """The header and a lazy iterator of the rounds of a trace file."""
    stream: IO[str] = open(source, encoding="utf-8") if not hasattr(source, "read") else source  # type: ignore[arg-type]  # noqa: SIM115
    first = stream.readline()
    try:
        data = json.loads(first)
    except json.JSONDecodeError as error:
        raise TraceError(f"trace: the first line is not a JSON header ({error.msg})") from None
    if data.get("format") != FORMAT or data.get("version") not in READABLE:
        raise TraceError(f"trace: format {data.get('format')!r} version {data.get('version')!r}; "
                         f"this reader knows {FORMAT!r} versions {', '.join(map(str, READABLE))}")
    header = TraceHeader(str(data["served_id"]), str(data["cache_identity"]), int(data["pages"]), int(data["slots"]))

    def rounds() -> Iterator[RoundRecord]:
        for number, line in enumerate(stream, start=2):
            if not line.strip():
                continue
            try:
                yield record_from_json(json.loads(line))
            except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
                raise TraceError(f"trace line {number}: not a round record ({error})") from None

    return header, rounds()


# ------------------------------------------------------------------------------------------------ recording

def addressed_rows(packing: GraphPacking, lanes: Sequence[LaneInput]) -> dict[str, tuple[int, ...] | None]:
    """Per destination the leading rows a round addresses: the lanes' slots for physical request rows,
    the graph's capacity rows otherwise; None: the whole buffer (a scalar)."""
    out: dict[str, tuple[int, ...] | None] = {}
    for binding in packing.bindings:
        if binding.indexing == V.INDEXING_SCALAR:
            out[binding.destination] = None
        elif binding.indexing == V.INDEXING_PHYSICAL_REQUEST_ROW:
            out[binding.destination] = tuple(sorted({lane.slot for lane in lanes}))
        elif binding.indexing == V.INDEXING_ACTIVE_ROW:  # the tail keeps whatever bytes it held
            out[binding.destination] = tuple(range(len(lanes)))
        else:
            out[binding.destination] = tuple(range(binding.rows))
    return out


def to_numpy(value: Any) -> np.ndarray:
    """A host copy of a NumPy array or a device tensor (duck-typed: this module never imports torch)."""
    if hasattr(value, "detach"):
        value = value.detach()
        if str(getattr(value, "dtype", "")) == "torch.bfloat16":
            value = value.float()
        return np.array(value.cpu().numpy())
    return np.array(value)


def read_rows(buffers: Mapping[str, Any], completion: Mapping[int, str], lanes: Sequence[LaneInput]) -> list[Completion]:
    """Each lane's completion row read straight from the completion buffers (row = the lane's slot)."""
    return list(completion_rows({field: to_numpy(buffers[name]) for field, name in completion.items()}, lanes))


class TraceRecorder:
    """An executor (the seam of `helios.runtime.rounds`) that records every round of the executor it
    wraps (see the module docstring): the transport is read when a round is submitted (the next
    submission may repack it), the rows when it is collected.

    `buffers` defaults to `executor.buffers` (name -> array or tensor: both runtimes keep them so);
    `sink` is anything with `round(record)` (a TraceWriter, or a list's `append` via `TraceList`).
    With `state` (the default) each round's state is recorded as well, read right after the
    submission: the written cache records and state rows from `buffers`, and the logits rows from
    the executor's launch plan where it exposes them (`LaunchPlan.scratch`: the first input of the
    plan's `sample` or `argmax` launch, when no later launch reused its storage)."""

    def __init__(self, executor: Any, serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest,
                 sink: Any, *, buffers: Mapping[str, Any] | None = None, state: bool = True) -> None:
        from conformance.state import StateSpec

        self.executor = executor
        self.frames = executor.frames
        self.sink = sink
        self.buffers = buffers if buffers is not None else executor.buffers
        self.completion = {slot.field: slot.buffer for slot in manifest.completion.fields}
        self.packings = {g.name: GraphPacking.resolve(g, manifest, physical_rows=serving.max_concurrency)
                         for g in serving.model.graphs}
        self.rounds = 0
        self.state = StateSpec.of(serving, manifest) if state else None
        # plan sequence -> the transport it was submitted with, and the state it wrote
        self._submitted: dict[int, tuple[dict, dict | None]] = {}

    @property
    def host_pages(self) -> int:
        """The wrapped executor's host tier (pages; 0: none): the engine decides its copies."""
        return getattr(self.executor, "host_pages", 0)

    @property
    def page_bytes(self) -> int:
        return getattr(self.executor, "page_bytes", 0)

    def round_costs(self):
        """The wrapped executor's measured round costs (None where it measured none): a recorded
        runtime chooses its speculative programs as the unrecorded one would."""
        measure = getattr(self.executor, "round_costs", None)
        return measure() if measure is not None else None

    def submit(self, plan: RoundPlan) -> None:
        self.executor.submit(plan)
        self._submitted[plan.sequence] = (self._transport(plan.graph, plan.lanes), self._state(plan),
                                          self._rank_states(plan))

    def _state(self, plan: RoundPlan) -> dict | None:
        from conformance.state import capture

        if self.state is None:
            return None
        # NOTE: production's launch plan (duck-typed); a reference executor's graphs have none (no logits).
        launch_plan = getattr(getattr(self.executor, "graphs", {}).get(plan.graph), "plan", None)
        scratch, launches = getattr(launch_plan, "scratch", None), getattr(launch_plan, "launches", ())
        logits = next((launch.inputs[0] for launch in launches
                       if launch.kernel in ("sample", "argmax") and getattr(launch, "inputs", ())), None)
        return capture(self.state, plan.graph, plan.lanes, self.buffers, scratch=scratch, logits=logits,
                       copies=plan.page_copies)

    def _rank_states(self, plan: RoundPlan) -> tuple:
        """What the round wrote on every peer rank, from its own buffers (production ranks only)."""
        from conformance.state import capture

        read = getattr(self.executor, "peer_buffers", None)
        if self.state is None or read is None:
            return ()
        spec = self.state
        names = {*spec.planes.get(plan.graph, ()), *spec.continuation.get(plan.graph, ()),
                 *(view.buffer for view in spec.views.get(plan.graph, ()))}
        return tuple(capture(spec, plan.graph, plan.lanes, buffers) for buffers in read(sorted(names)))

    def collect(self, plan: RoundPlan) -> Sequence[Completion]:
        transport, state, rank_states = self._submitted.pop(plan.sequence)
        error: BaseException | None = None
        scores = None
        try:
            collected = self.executor.collect(plan)
            scores = getattr(collected, "scores", None)  # a scored round's prompt scores (not recorded)
            rows = list(collected)
        except Exception as raised:  # the executor failed the round: record what it wrote
            error = raised
            # NOTE: a later submission may have rewritten the completion buffers: an executor that
            # reads each frame back on its own (`frame_readback`) holds this round's record.
            readback = getattr(self.executor, "frame_readback", None)
            if readback is not None:
                own = readback[plan.frame]
                rows = read_rows({str(f): t for f, t in own.items()}, {f: str(f) for f in own}, plan.lanes)
            else:
                rows = read_rows(self.buffers, self.completion, plan.lanes)
        self.rounds += 1
        self.sink.round(RoundRecord(self.rounds, plan.graph, plan.frame, tuple(plan.lanes), transport, tuple(rows),
                                    plan.sequence, None if error is None else f"{type(error).__name__}: {error}",
                                    state, plan.outstanding, tuple(plan.page_copies), rank_states))
        if error is not None:
            raise error
        if scores is not None:  # the rows as read, with the scores the scheduler validates and delivers
            return CompletionRows.of(rows, scores)
        return rows

    def _transport(self, graph_name: str, lanes: Sequence[LaneInput]) -> dict[str, tuple[tuple[int, ...], np.ndarray]]:
        transport = {}
        for name, rows_addressed in addressed_rows(self.packings[graph_name], lanes).items():
            values = to_numpy(self.buffers[name])
            if rows_addressed is None:
                transport[name] = ((), values.reshape(-1))
            else:
                transport[name] = (rows_addressed, values[list(rows_addressed)])
        return transport


def recorder_for(executor: Any, serving: contract_pb2.ServingContract, manifest: manifest_pb2.ExecutionManifest,
                 sink: Any, *, buffers: Mapping[str, Any] | None = None, state: bool = True) -> TraceRecorder:
    """A recorder around `executor` (`state`: also record what each round wrote)."""
    return TraceRecorder(executor, serving, manifest, sink, buffers=buffers, state=state)


class TraceList:
    """An in-memory sink: the records, in order (what `helios conform` audits without a file)."""

    def __init__(self) -> None:
        self.records: list[RoundRecord] = []

    def round(self, record: RoundRecord) -> None:
        self.records.append(record)


def header_for(serving: contract_pb2.ServingContract, pages: int) -> TraceHeader:
    return TraceHeader(serving.served_id, serving.cache_identity, pages, serving.max_concurrency)
