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


class CopyRun(NamedTuple):
    """`count` copies of one kind between consecutive pages (or rows) and consecutive host pages."""

    page: int
    host_page: int
    count: int
    continuation: bool


def copy_batches(copies: Sequence[PageCopy]) -> list[tuple[list[PageCopy], list[PageCopy]]]:
    """A plan's copies as batches of (offloads, readmissions): applying every batch in order, its
    offloads first and then its readmissions, each kind in any order, equals applying the copies one
    by one in plan order. A copy joins the open batch unless the order it keeps with one already
    there would be lost: an offload reading a page a readmission of the batch writes, or writing a
    host page a readmission of the batch reads or another offload writes; a readmission writing a
    page another readmission writes. (A readmission after an offload that reads its page or writes
    its host page keeps its order: offloads go first.) Batches let an executor copy runs of pages at
    once (`copy_runs`) instead of one page of one plane at a time."""
    batches: list[tuple[list[PageCopy], list[PageCopy]]] = []
    offloads: list[PageCopy] = []
    readmits: list[PageCopy] = []
    written_pages: set[int] = set()  # device pages the batch's readmissions write
    read_hosts: set[int] = set()  # host pages they read
    written_hosts: set[int] = set()  # host pages the batch's offloads write
    for copy in copies:
        if copy.readmit:
            conflict = copy.page in written_pages
        else:
            conflict = ((not copy.continuation and copy.page in written_pages) or copy.host_page in read_hosts
                        or copy.host_page in written_hosts)
        if conflict:
            batches.append((offloads, readmits))
            offloads, readmits = [], []
            written_pages, read_hosts, written_hosts = set(), set(), set()
        if copy.readmit:
            readmits.append(copy)
            written_pages.add(copy.page)
            read_hosts.add(copy.host_page)
        else:
            offloads.append(copy)
            written_hosts.add(copy.host_page)
    if offloads or readmits:
        batches.append((offloads, readmits))
    return batches


def copy_runs(copies: Sequence[PageCopy]) -> list[CopyRun]:
    """Copies of one kind of one batch (`copy_batches`: independent of each other) as runs of
    consecutive pages to consecutive host pages, continuation rows apart."""
    runs: list[CopyRun] = []
    for copy in sorted(copies, key=lambda c: (c.continuation, c.page)):
        last = runs[-1] if runs else None
        if (last is not None and last.continuation == copy.continuation and copy.page == last.page + last.count
                and copy.host_page == last.host_page + last.count):
            runs[-1] = last._replace(count=last.count + 1)
        else:
            runs.append(CopyRun(copy.page, copy.host_page, 1, copy.continuation))
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


__all__ = ["Executor", "PageCopy", "PageTableUpdate", "RoundPlan", "full_rows", "single_round"]
