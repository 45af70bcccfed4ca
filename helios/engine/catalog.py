"""Graph variants as the scheduler sees them (host side): operation, capacities, pending-token owner.

Owns choosing the smallest captured variant that fits a cohort: the fewest packed tokens P, then the
fewest lanes B, among the variants of one operation whose B holds the lanes and whose P holds the
tokens. Capacities are what the contract declares; nothing here depends on a model family.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from helios.errors import HeliosError
from helios.proto import contract_pb2
from helios.runtime.completion import SpeculativeRound

C = contract_pb2


class MissingOperation(HeliosError):
    """The selected graphs lack an operation the scheduler needs (INITIALIZATION, PREFILL or DECODE)."""


@dataclass(frozen=True, slots=True)
class GraphVariant:
    name: str  # graph handle name
    operation: int  # contract_pb2.Operation
    batch_capacity: int  # B: lanes a round may hold
    packed_token_capacity: int  # P: tokens a round may hold
    device_pending: bool  # the pending token is device-owned (a state view, no host PENDING_TOKEN binding)
    page_table: bool = True  # the graph uploads page tables (binds a PAGE_TABLE source)
    # SPECULATIVE graphs: W (target rows a lane, pending token included), D (proposals drawn), the lane
    # limit min(D + 1, W), and what its completion rows are validated against; 0 / None for every
    # other operation.
    width: int = 0
    drafts: int = 0
    lane_limit: int = 0
    check: SpeculativeRound | None = None
    # SPECULATIVE graphs: the program takes per-position grammar masks (CANDIDATE_GRAMMAR_MASKS), so a
    # grammar-constrained lane may speculate over its copied proposals
    grammar_masks: bool = False

    @property
    def lane_width(self) -> int:
        """Target rows a lane: W of a SPECULATIVE graph, 1 for every other."""
        return self.width if self.operation == C.OPERATION_SPECULATIVE else 1

    @property
    def draft_passes(self) -> int:
        """Positions the draft writes from a lane's pending token on, whatever its length."""
        return max(self.drafts, min(self.drafts + 1, self.width))

    def __post_init__(self) -> None:
        if self.batch_capacity < 1 or self.packed_token_capacity < 1:
            raise ValueError(f"graph {self.name}: capacities must be >= 1")

    def fits(self, lanes: int, tokens: int) -> bool:
        return lanes <= self.batch_capacity and tokens <= self.packed_token_capacity


class GraphCatalog:
    """The selected graphs, grouped by operation, smallest first."""

    REQUIRED = (C.OPERATION_INITIALIZATION, C.OPERATION_PREFILL, C.OPERATION_DECODE)

    def __init__(self, variants: Iterable[GraphVariant]) -> None:
        self._by_operation: dict[int, list[GraphVariant]] = {}
        self._max_tokens: dict[tuple[int, int], int] = {}
        self._limits: dict[tuple[int, int], list[int]] = {}
        self._by_name: dict[str, GraphVariant] = {}
        for variant in variants:
            self._by_operation.setdefault(int(variant.operation), []).append(variant)
            self._by_name[variant.name] = variant
        for group in self._by_operation.values():
            group.sort(key=lambda v: (v.packed_token_capacity, v.batch_capacity, v.name))
        for operation in self.REQUIRED:
            if operation not in self._by_operation:
                raise MissingOperation(f"no selected graph performs {C.Operation.Name(operation)}")
        generating = [v for op, group in self._by_operation.items()
                      if op not in (C.OPERATION_INITIALIZATION, C.OPERATION_RESTORATION) for v in group]
        self._device_pending = bool(generating) and all(v.device_pending for v in generating)

    @classmethod
    def from_graphs(cls, graphs: Iterable) -> GraphCatalog:
        """From `helios.contract` Graph records (a PreparedContract's or a Selection's graphs)."""
        variants = []
        for g in graphs:
            sources = {int(b.source) for b in g.value_bindings}
            host_pending = C.VALUE_SOURCE_PENDING_TOKEN in sources
            spec = g.speculative
            speculative = {} if spec is None else dict(
                width=spec.verify_tokens, drafts=spec.draft_tokens, lane_limit=spec.lane_token_limit,
                check=SpeculativeRound.of(g), grammar_masks=C.VALUE_SOURCE_CANDIDATE_GRAMMAR_MASKS in sources)
            variants.append(GraphVariant(g.name, int(g.operation), g.batch_capacity, g.packed_token_capacity,
                                         device_pending=g.pending_token_state is not None and not host_pending,
                                         page_table=C.VALUE_SOURCE_PAGE_TABLE in sources, **speculative))
        return cls(variants)

    def has(self, operation: int) -> bool:
        return operation in self._by_operation

    def variants(self, operation: int) -> tuple[GraphVariant, ...]:
        return tuple(self._by_operation.get(operation, ()))

    def smallest(self, operation: int, *, lanes: int, tokens: int) -> GraphVariant | None:
        """The smallest variant of `operation` holding `lanes` lanes and `tokens` tokens, or None."""
        for variant in self._by_operation.get(operation, ()):
            if variant.fits(lanes, tokens):
                return variant
        return None

    def variant(self, name: str) -> GraphVariant:
        """The variant of graph `name`."""
        return self._by_name[name]

    def has_graph(self, name: str) -> bool:
        """Whether graph `name` is selected."""
        return name in self._by_name

    def speculative(self, width: int, *, lanes: int) -> GraphVariant | None:
        """The SPECULATIVE variant of `width` with the fewest lanes holding `lanes` (None: none)."""
        fitting = [v for v in self._by_operation.get(C.OPERATION_SPECULATIVE, ())
                   if v.width == width and v.batch_capacity >= lanes]
        return min(fitting, key=lambda v: (v.batch_capacity, v.packed_token_capacity, v.name), default=None)

    def speculative_lanes(self, width: int) -> int:
        """The most lanes a SPECULATIVE round of `width` holds (0: no such graph)."""
        return max((v.batch_capacity for v in self._by_operation.get(C.OPERATION_SPECULATIVE, ())
                    if v.width == width), default=0)

    def max_lanes(self, operation: int) -> int:
        return max((v.batch_capacity for v in self._by_operation.get(operation, ())), default=0)

    def max_tokens(self, operation: int, *, lanes: int = 1) -> int:
        """The most tokens one round of `operation` with `lanes` lanes can hold (0: none fits)."""
        key = (operation, lanes)
        if key not in self._max_tokens:  # asked once per lane of every cohort: memoized
            self._max_tokens[key] = max((v.packed_token_capacity for v in self._by_operation.get(operation, ())
                                         if v.batch_capacity >= lanes), default=0)
        return self._max_tokens[key]

    def token_limits(self, operation: int) -> list[int]:
        """`max_tokens(operation, lanes=k)` for k in [0, max_lanes(operation)], as one list (memoized)."""
        key = (operation, -1)
        table = self._limits.get(key)
        if table is None:
            table = self._limits[key] = [self.max_tokens(operation, lanes=k)
                                         for k in range(self.max_lanes(operation) + 1)]
        return table

    @property
    def device_pending(self) -> bool:
        """Every generating variant keeps its pending token on the device (no host feedback needed)."""
        return self._device_pending
