"""Measured round costs (host side, no torch): what one round of each selected graph costs, as the
executor measured it while loading.

    costs = time_rounds(graphs, run)            # each graph: a few timed idle rounds, the median
    costs.seconds("decode_b4")                  # 0.0021, or None where the graph was not measured

Both executors produce the table (`NativeExecutor.round_costs`: timed replays of each captured graph
right after capture, or eager plan runs on a CPU; `ReferenceExecutor.round_costs`: timed interpreted
rounds, measured once, on first asking) and the scheduler's program choice reads it
(`helios.engine.program_choice`). Only the graphs that choice compares are measured: every DECODE
variant (at each lane capacity B) and every SPECULATIVE variant (at each B and width W). A round is
timed over the executor's idle lane set (zeroed transport: lane 0 at position 0), which costs what a
captured graph costs: its extents are static, so a replay's work does not depend on which lanes are
live (attention over longer histories excepted; see docs/speculative.md).

The table is plain data with the monotonic time it was measured at (`measured_at`): a consumer
decides whether it is stale (`RoundCosts.fresh`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from helios.proto import contract_pb2

C = contract_pb2

# The operations whose round costs the program choice compares.
MEASURED_OPERATIONS = (C.OPERATION_DECODE, C.OPERATION_SPECULATIVE)


@dataclass(frozen=True, slots=True)
class RoundCost:
    """One selected graph's measured round cost."""

    graph: str  # graph handle name
    operation: int  # contract_pb2.Operation (DECODE or SPECULATIVE)
    lanes: int  # B: the graph's batch capacity
    width: int  # W: target rows a lane (SPECULATIVE), 1 for DECODE
    seconds: float  # the median of the timed rounds, wall time including the device's completion

    @property
    def operation_name(self) -> str:
        return C.Operation.Name(self.operation).removeprefix("OPERATION_").lower()


@dataclass(frozen=True, slots=True)
class RoundCosts:
    """The cost table: one `RoundCost` per measured graph, and when it was measured."""

    entries: tuple[RoundCost, ...] = ()
    measured_at: float = field(default_factory=time.monotonic)  # time.monotonic() seconds at measurement
    repeats: int = 0  # timed rounds per graph

    def __post_init__(self) -> None:
        for entry in self.entries:
            if not entry.seconds > 0.0:
                raise ValueError(f"graph {entry.graph}: a measured round cost must be > 0 s, got {entry.seconds}")

    def seconds(self, graph: str) -> float | None:
        """The measured cost of one round of `graph` (None: not measured)."""
        for entry in self.entries:
            if entry.graph == graph:
                return entry.seconds
        return None

    def by_graph(self) -> dict[str, float]:
        return {entry.graph: entry.seconds for entry in self.entries}

    def fresh(self, now: float, lifetime: float | None) -> bool:
        """Whether the table may still be used at monotonic time `now`: always with no `lifetime`
        (a captured graph's cost does not change while it is served), else for `lifetime` seconds."""
        return lifetime is None or now - self.measured_at <= lifetime

    def lines(self) -> list[str]:
        """The table as text, one graph a line (the `helios serve` startup log, `helios inspect`)."""
        rows = sorted(self.entries, key=lambda e: (e.operation, e.width, e.lanes))
        return [f"{e.operation_name:<12} lanes={e.lanes:<4} width={e.width:<3} {e.seconds * 1e3:10.3f} ms  {e.graph}"
                for e in rows]


@dataclass(frozen=True, slots=True)
class ServedCost:
    """One graph's served rounds: how many the runtime completed and their moving average wall time
    (what a round cost the serving loop, host work and overlap included; helios/engine/program_choice.py,
    `ServedCosts`)."""

    graph: str  # graph handle name
    operation: int  # contract_pb2.Operation
    lanes: int  # B: the graph's batch capacity
    width: int  # W: target rows a lane (SPECULATIVE), 1 for every other operation
    rounds: int  # served rounds observed
    seconds: float  # their moving average wall time

    @property
    def operation_name(self) -> str:
        return C.Operation.Name(self.operation).removeprefix("OPERATION_").lower()


@dataclass(frozen=True, slots=True)
class MeasuredGraph:
    """What `time_rounds` needs of a graph: its name and the geometry the table records."""

    name: str
    operation: int
    lanes: int
    width: int


def measured_graphs(graphs: Iterable, speculative_widths: Mapping[str, int]) -> list[MeasuredGraph]:
    """The graphs to measure among `graphs` (anything with `.name`, `.operation`, `.batch_capacity`):
    the DECODE and SPECULATIVE ones; `speculative_widths` gives each SPECULATIVE graph's W."""
    out = []
    for g in graphs:
        if g.operation not in MEASURED_OPERATIONS:
            continue
        width = 1 if g.operation == C.OPERATION_DECODE else speculative_widths[g.name]
        out.append(MeasuredGraph(g.name, int(g.operation), int(g.batch_capacity), int(width)))
    return sorted(out, key=lambda g: g.name)


def time_rounds(graphs: Iterable[MeasuredGraph], run: Callable[[str], None], *, repeats: int = 3,
                clock: Callable[[], float] = time.perf_counter) -> RoundCosts:
    """Time `repeats` rounds of each graph with `run(name)` (which must return once the round's work
    is done, the device's included) and keep the median. A graph timed at 0 s (a clock too coarse)
    is recorded at the clock's smallest step instead, so every entry is positive."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    entries = []
    for graph in graphs:
        samples = []
        for _ in range(repeats):
            start = clock()
            run(graph.name)
            samples.append(clock() - start)
        seconds = max(statistics.median(samples), 1e-9)
        entries.append(RoundCost(graph.name, graph.operation, graph.lanes, graph.width, seconds))
    return RoundCosts(tuple(entries), measured_at=time.monotonic(), repeats=repeats)


__all__ = ["MEASURED_OPERATIONS", "MeasuredGraph", "RoundCost", "RoundCosts", "ServedCost", "measured_graphs",
           "time_rounds"]
