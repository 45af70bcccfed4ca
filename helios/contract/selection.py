"""Load-time selection (host side): which captured graphs a runtime exposes, under startup options.

Load-time selection may reduce captured concurrency and speculative width, never raise them. History
drafting is a startup option (export records no preference): it requires enabled learned speculation
and concrete copied-token inputs in each selected wider graph. state_rows_per_request is the maximum
among the selected graphs; it partitions execution and snapshot rows.
"""

from __future__ import annotations

from dataclasses import dataclass

import helios.contract.errors as e
from helios.contract.enums import COPIED_TOKEN_SOURCES, Operation
from helios.contract.model import Graph


@dataclass(frozen=True, slots=True)
class StartupOptions:
    max_concurrency: int | None = None  # None: the contract's selected concurrency
    speculative_width: int | None = None  # None: the widest captured width; 1 disables learned speculation
    history_drafting: bool = False

    def __post_init__(self) -> None:
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise e.InvalidSelection("max_concurrency", f"must be >= 1, got {self.max_concurrency}")
        if self.speculative_width is not None and self.speculative_width < 1:
            raise e.InvalidSelection("speculative_width", f"must be >= 1, got {self.speculative_width}")


@dataclass(frozen=True, slots=True)
class Selection:
    graphs: tuple[Graph, ...]  # exposed graphs, in contract order
    max_concurrency: int  # request slots
    speculative_width: int  # widest exposed W (1 without speculative graphs)
    state_rows_per_request: int  # max over the exposed graphs
    history_drafting: bool

    def graphs_for(self, operation: Operation) -> tuple[Graph, ...]:
        """Exposed graphs of one operation, smallest capacity first."""
        return tuple(sorted((g for g in self.graphs if g.operation == operation),
                            key=lambda g: (g.batch_capacity, g.packed_token_capacity, g.name)))


def select(contract, options: StartupOptions) -> Selection:
    concurrency = options.max_concurrency or contract.max_concurrency
    if concurrency > contract.max_concurrency:
        raise e.InvalidSelection("max_concurrency", f"{concurrency} exceeds the prepared concurrency "
                                 f"{contract.max_concurrency}; load-time selection may only reduce it")
    # Per operation, keep every graph up to the smallest captured batch capacity that covers the
    # concurrency (all of them when none does), so each operation stays served whatever its capacities.
    capacities: dict = {}
    for g in contract.graphs:
        capacities.setdefault(g.operation, set()).add(g.batch_capacity)
    batch_limit = {op: min((b for b in caps if b >= concurrency), default=max(caps))
                   for op, caps in capacities.items()}

    widths = contract.speculative_widths
    width = options.speculative_width if options.speculative_width is not None else (max(widths) if widths else 1)
    if width > 1 and width not in widths:
        raise e.InvalidSelection("speculative_width",
                                 f"width {width} was not captured (captured: {', '.join(map(str, widths)) or 'none'})")

    def exposed(g: Graph) -> bool:
        if g.batch_capacity > batch_limit[g.operation]:
            return False
        return g.speculative is None or g.speculative.verify_tokens <= width

    graphs = tuple(g for g in contract.graphs if exposed(g))
    if options.history_drafting:
        _check_history_drafting(contract, graphs, width)
    return Selection(
        graphs=graphs,
        max_concurrency=concurrency,
        speculative_width=max((g.speculative.verify_tokens for g in graphs if g.speculative), default=1),
        state_rows_per_request=max((g.state_rows_per_request for g in graphs), default=0),
        history_drafting=options.history_drafting,
    )


def _check_history_drafting(contract, graphs: tuple[Graph, ...], width: int) -> None:
    learned = [g for g in graphs if g.speculative is not None and g.speculative.draft_tokens > 0]
    if width <= 1 or not learned:
        raise e.HistoryDraftingUnsupported(
            "history_drafting", "history drafting requires enabled learned speculation "
            "(a selected speculative width above 1 with proposal-drawing graphs)")
    for g in graphs:
        if g.speculative is None or g.speculative.verify_tokens <= 1:
            continue
        bound = {b.source for b in g.value_bindings}
        missing = sorted(s.name for s in COPIED_TOKEN_SOURCES - bound)
        if missing:
            index = contract.graphs.index(g)
            raise e.HistoryDraftingUnsupported(
                f"model.graphs[{index}].value_bindings",
                f"wider graph {g.name!r} has no copied-token inputs ({', '.join(missing)} unbound)")
