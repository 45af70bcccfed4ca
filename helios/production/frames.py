"""Two execution frames over the production executor (device side): `FramedExecutor`.

    handle = executor.submit_round(graph_name, lanes, frame)   # pack, upload, launch; returns at once
    rows = executor.collect(handle)                            # wait for that round, read back, validate

A core whose transport declares two frames and whose generating graphs keep the pending token on the
device (a pending-token state view, no PENDING_TOKEN binding) lets the scheduler submit round N+1
before round N completes: the host packs the next round while the device runs the current one.
`ProductionRuntime` uses `submit_round`/`collect` when the executor has them.

One stream orders the device work: round N+1's uploads follow round N's graph, and its graph rewrites
the completion record only after round N's read-back copy was enqueued. What two frames add is on
the host: one completion read-back per frame (pinned on a GPU, copied asynchronously and fenced by an
event; a copy on a CPU, where rounds run synchronously), and staging that is never repacked before the
previous round's uploads have run (an event recorded after each round's uploads). The transport owns
the frame index: each round's record carries the frame it was submitted in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from helios.errors import HeliosError
from helios.production.capture import GraphCapture, GraphNotCaptured
from helios.production.executor import ExecutorGraph, NativeExecutor
from helios.production.readback import read_rows
from helios.runtime.completion import CompletionRows, validate_round
from helios.runtime.packing import LaneColumns, LaneInput

FRAMES = 2


class FrameBusy(HeliosError):
    """A round was submitted into a frame whose previous round has not been collected, or a third
    round was submitted while two are outstanding."""


class FrameOrderViolated(HeliosError):
    """Rounds were collected out of submission order, or a handle was collected twice."""


@dataclass(frozen=True, slots=True)
class FrameHandle:
    """One submitted round, until it is collected."""

    graph: str  # graph handle name
    lanes: Sequence[LaneInput]  # the round's lanes, submission order
    columns: LaneColumns  # those lanes as the packing saw them
    sequence: int  # the transport's submission sequence (untruncated)
    frame: int  # 0 or 1
    done: Any  # torch.cuda.Event recorded after the read-back copy, or None on a CPU


class FramedExecutor(NativeExecutor):
    """`NativeExecutor` plus `submit_round` / `collect` over two frames (see the module docstring)."""

    def __init__(self, graphs: Mapping[str, ExecutorGraph], buffers: Mapping[str, torch.Tensor],
                 completion: Mapping[int, str], *, sampled_tokens: int, page_tokens: int, device: torch.device,
                 capture: GraphCapture | None) -> None:
        super().__init__(graphs, buffers, completion, sampled_tokens=sampled_tokens, device=device, capture=capture)
        self.page_tokens = page_tokens
        pinned = device.type == "cuda"
        # frame -> completion field -> host read-back of the round submitted in that frame
        self.frame_readback: list[dict[int, torch.Tensor]] = [
            {f: torch.empty(self.buffers[name].shape, dtype=self.buffers[name].dtype, pin_memory=pinned)
             for f, name in self.completion.items()} for _ in range(FRAMES)]
        self._outstanding: list[FrameHandle] = []  # submission order
        self._uploaded: Any = None  # event after the last round's uploads (GPU): staging is free again
        self.peak_outstanding = 0  # the most rounds ever outstanding at once (right after a submission)
        self.submissions_while_outstanding = 0  # rounds submitted while another was still outstanding

    @property
    def outstanding(self) -> int:
        return len(self._outstanding)

    def run_round(self, graph_name: str, lanes: Sequence[LaneInput]) -> CompletionRows:
        """One round, synchronously, in frame 0 (refused while framed rounds are outstanding)."""
        if self._outstanding:
            raise FrameBusy(f"graph {graph_name}: a synchronous round while {len(self._outstanding)} framed "
                            "rounds are outstanding")
        return self.collect(self.submit_round(graph_name, lanes, 0))

    def submit_round(self, graph_name: str, lanes: Sequence[LaneInput], frame: int) -> FrameHandle:
        """Pack `lanes`, upload, launch `graph_name` in `frame` and enqueue its read-back; no wait for
        the device except for the previous round's uploads out of the shared staging."""
        if frame not in range(FRAMES):
            raise FrameBusy(f"graph {graph_name}: frame {frame} outside the transport's {FRAMES} frames")
        if len(self._outstanding) >= FRAMES or any(h.frame == frame for h in self._outstanding):
            raise FrameBusy(f"graph {graph_name}: frame {frame} still holds an uncollected round "
                            f"({len(self._outstanding)} outstanding)")
        self.sequence += 1  # a submission that fails before launching still takes its number
        graph = self.graphs.get(graph_name)
        if graph is None:
            raise GraphNotCaptured(f"graph {graph_name!r} is not loaded (loaded: {sorted(self.graphs)})")
        if self._uploaded is not None:
            self._uploaded.synchronize()  # the previous round's copies have left the staging
        self._pack(graph, lanes)
        columns = self._lane_columns(lanes)
        gpu = self.device.type == "cuda"
        if gpu:
            self._uploaded = torch.cuda.Event()
            self._uploaded.record(torch.cuda.current_stream(self.device))
        self._execute(graph, frame)
        readback = self.frame_readback[frame]
        for field, host in readback.items():
            host.copy_(self.buffers[self.completion[field]], non_blocking=gpu)
        done = None
        if gpu:
            done = torch.cuda.Event()
            done.record(torch.cuda.current_stream(self.device))
        handle = FrameHandle(graph_name, lanes, columns, self.sequence, frame, done)
        if self._outstanding:
            self.submissions_while_outstanding += 1
        self._outstanding.append(handle)
        self.peak_outstanding = max(self.peak_outstanding, len(self._outstanding))
        return handle

    def collect(self, handle: FrameHandle) -> CompletionRows:
        """Wait for the oldest outstanding round (`handle`), read its frame's record, validate it."""
        if not self._outstanding or self._outstanding[0] is not handle:
            raise FrameOrderViolated(f"graph {handle.graph}: round {handle.sequence} collected out of submission "
                                     "order (or twice)")
        self._outstanding.pop(0)
        if handle.done is not None:
            handle.done.synchronize()
        rows = read_rows(self.frame_readback[handle.frame], handle.columns.slots, len(handle.columns.lanes))
        validate_round(handle.graph, handle.lanes, rows, sequence=handle.sequence,
                       sampled_tokens=self.sampled_tokens, page_tokens=self.page_tokens, frame=handle.frame)
        return rows
