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


def copy_chunks(copies: Sequence[PageCopy], limit: int) -> list[list[PageCopy]]:
    """A plan's copies as consecutive chunks of at most `limit` (>= 1) copies, in which no copy reads
    or writes what an earlier copy of its chunk writes: an executor may then read every source of a
    chunk before writing any destination (a gather into staging, then a scatter), chunk after chunk,
    and get what applying the copies one by one in plan order gives. A copy may write what an earlier
    one of its chunk reads: the read comes first. So a readmitted prefix is one chunk per `limit`
    copies, although each readmission takes a device page whose checkpoint it offloads first and the
    next offload reuses the host page the last readmission read:

        offload  d1 -> h9    readmit  h1 -> d1    offload  d2 -> h1    readmit  h2 -> d2   ...

    (a device page is written by a readmission, read by an offload; a host page is written by an
    offload, read by a readmission; a continuation row is only read.)"""
    if limit < 1:
        raise ValueError(f"a chunk holds at least one copy, got {limit}")
    chunks: list[list[PageCopy]] = []
    chunk: list[PageCopy] = []
    written_pages: set[int] = set()  # device pages the chunk's readmissions write
    written_hosts: set[int] = set()  # host pages the chunk's offloads write
    for copy in copies:
        if copy.readmit:
            conflict = copy.host_page in written_hosts or copy.page in written_pages
        else:
            conflict = (copy.host_page in written_hosts
                        or (not copy.continuation and copy.page in written_pages))
        if conflict or len(chunk) == limit:
            chunks.append(chunk)
            chunk, written_pages, written_hosts = [], set(), set()
        chunk.append(copy)
        if copy.readmit:
            written_pages.add(copy.page)
        else:
            written_hosts.add(copy.host_page)
    if chunk:
        chunks.append(chunk)
    return chunks


def host_runs(copies: Sequence[PageCopy]) -> list[tuple[int, int, int]]:
    """(first, host_page, count) for each run of `copies` (in staging order) whose host pages are
    consecutive: copies [first, first + count) touch host pages [host_page, host_page + count)."""
    runs: list[tuple[int, int, int]] = []
    for index, copy in enumerate(copies):
        if runs and copy.host_page == runs[-1][1] + runs[-1][2]:
            first, host_page, count = runs[-1]
            runs[-1] = (first, host_page, count + 1)
        else:
            runs.append((index, copy.host_page, 1))
    return runs


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


__all__ = ["Executor", "PageCopy", "PageTableUpdate", "RoundPlan", "copy_chunks", "full_rows", "host_runs", "single_round"]
