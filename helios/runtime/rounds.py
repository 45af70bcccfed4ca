"""The seam between the host engine and an executor (host side, no torch): one round as plain data.

    plan = scheduler.schedule()                         # RoundPlan | None
    executor.submit(plan)                               # pack, upload, launch (returns at once on a GPU)
    rows = executor.collect(plan)                       # the round's completion rows, lane order
    outcomes = scheduler.complete(plan, rows)           # the one validation, then every lane retires

Owns `RoundPlan` (what the scheduler decided for one submission), `PageTableUpdate` (a page-table
delta the executor applies, instead of rediscovering what changed) and the `Executor` protocol that
both runtimes' executors implement (`helios.reference.executor.ReferenceExecutor`,
`helios.production.executor.NativeExecutor`). The plan is its own handle: an executor holds at most
`frames` submitted, uncollected plans, and they are collected in submission order. An executor never
validates what it read back; `helios.runtime.completion.validate_round`, called by the scheduler, is
the one validation of a completion row. An executor may also report `round_costs()`, the round cost
of each DECODE and SPECULATIVE graph it measured (`helios.runtime.costs.RoundCosts`, or None), which
the adaptive speculative choice reads once, when the runtime is built.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from helios.runtime.completion import Completion
from helios.runtime.lanes import LaneInput


class PageTableUpdate(NamedTuple):
    """Page-table entries a slot gained since its row was last uploaded (every page-table view of a
    physical request row applies it, each with its own page offset). A plain tuple: a round builds
    one per slot whose pages grew."""

    slot: int  # physical request slot: the row of every page-table destination
    start: int  # first entry index written; 0 rewrites the whole row (a new slot generation), padding included
    entries: tuple[int, ...]  # page ids for indices [start, start + len(entries))


class PageCopy(NamedTuple):
    """One copy between a device cache page and a host-tier page (every cache plane of every rank),
    applied in plan order before the round's program: an evicted checkpoint offloaded to the host
    tier (`readmit` False: device page -> host page) or a host-tier hit readmitted (host -> device).
    With `continuation` (an offload only) `page` is a row of the continuation storage instead: a
    published continuation evicted for its row, each cache plane's host page taken from that plane's
    continuation plane (a row is one page record of it). The engine decides them
    (helios/engine/host_tier.py); executors copy."""

    readmit: bool  # True: host_page -> page; False: page -> host_page
    page: int  # device cache page (with `continuation`: continuation row)
    host_page: int  # host-tier page
    continuation: bool = False  # the source is continuation row `page` (readmit False)


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """One submission: a graph over a cohort, in submission order."""

    sequence: int  # the submission sequence (untruncated); the transport writes it, every row must echo it
    frame: int  # the execution frame (0, or 1 when two rounds are in flight)
    graph: str  # graph handle name
    operation: int  # contract_pb2.Operation of the graph
    lanes: tuple[LaneInput, ...]  # one per request, submission order
    request_ids: tuple[str, ...]  # lanes[i] belongs to request_ids[i]
    page_table_updates: tuple[PageTableUpdate, ...]  # deltas since each slot's last upload, applied before the run
    constrained_lanes: int  # lanes whose request is grammar-constrained (the flare_ metrics)
    outstanding: int  # rounds outstanding right after this submission, itself included
    # host-tier copies decided since the previous submission, applied in order before anything else
    page_copies: tuple[PageCopy, ...] = ()

    def __post_init__(self) -> None:
        if len(self.lanes) != len(self.request_ids):
            raise ValueError("a round plan needs one request id per lane")


class Executor(Protocol):
    """Runs round plans over one core's programs; see the module docstring."""

    frames: int  # plans it can hold submitted and uncollected at once (1 or 2)

    def submit(self, plan: RoundPlan) -> None:
        """Apply the plan's host-tier page copies (first, in order) and page-table updates, pack its lanes, write the transport fields (frame
        index, submission sequence) and launch its graph."""
        ...

    def collect(self, plan: RoundPlan) -> Sequence[Completion]:
        """The completion rows of `plan` (the oldest submitted one), one per lane in lane order, as
        read back: unvalidated."""
        ...


def full_rows(lanes: Sequence[LaneInput]) -> tuple[PageTableUpdate, ...]:
    """Updates that rewrite each lane's whole page-table row: for a round planned without a page-table
    history (a single round run outside a scheduler)."""
    return tuple(PageTableUpdate(lane.slot, 0, tuple(lane.page_ids)) for lane in lanes)


def single_round(graph: str, operation: int, lanes: Sequence[LaneInput], *, sequence: int, frame: int = 0) -> RoundPlan:
    """A plan for one round run on its own (tests, benches, the sequential reference engine): every
    lane's page-table row rewritten, request ids numbered by lane."""
    lanes = tuple(lanes)
    return RoundPlan(sequence=sequence, frame=frame, graph=graph, operation=operation, lanes=lanes,
                     request_ids=tuple(f"lane-{i}" for i in range(len(lanes))), page_table_updates=full_rows(lanes),
                     constrained_lanes=sum(lane.grammar_mask is not None or lane.candidate_masks is not None
                                           for lane in lanes), outstanding=1)


__all__ = ["Executor", "PageCopy", "PageTableUpdate", "RoundPlan", "full_rows", "single_round"]
