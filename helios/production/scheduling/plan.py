"""The plain data crossing the scheduler's seams (host side).

    plan = scheduler.schedule()                    # RoundPlan | None
    rows = executor.run_round(plan.graph, plan.lanes)
    outcomes = scheduler.complete(plan, rows)      # RoundOutcomes: a sequence of LaneOutcome, as columns

`SchedulerRequest` is what the runtime hands the scheduler; `SchedulerConfig` fixes the limits once.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.errors import HeliosError
from helios.runtime.interface import GrammarMatcher
from helios.runtime.packing import LaneInput
from helios.runtime.request import GenerationRequest
from helios.runtime.rows import ColumnRows


class InvalidSchedulerConfig(HeliosError):
    """A scheduler limit is out of range; the message names it."""


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_active: int  # request slots the scheduler fills (<= the graphs' request slots)
    queue_capacity: int  # the pending admission deque bound
    page_tokens: int  # tokens per page (CacheContract.page_tokens)
    context_tokens: int  # the served context: prompt + output limit must fit
    input_tokens: int  # prompt ids lie in [0, input_tokens)
    sampled_tokens: int  # sampled ids lie in [0, sampled_tokens)
    eos_ids: tuple[int, ...] = ()  # the core's EOS ids (a request without its own uses these)
    frames: int = 1  # execution frames the transport declares (1 or 2)

    def __post_init__(self) -> None:
        for name in ("max_active", "page_tokens", "context_tokens", "input_tokens", "sampled_tokens"):
            if getattr(self, name) < 1:
                raise InvalidSchedulerConfig(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.queue_capacity < 0:
            raise InvalidSchedulerConfig(f"queue_capacity must be >= 0, got {self.queue_capacity}")
        if self.frames not in (1, 2):
            raise InvalidSchedulerConfig(f"frames must be 1 or 2, got {self.frames}")


@dataclass(frozen=True, slots=True)
class SchedulerRequest:
    request_id: str
    generation: GenerationRequest
    host_stop: bool = False  # string stops: the host-stop barrier (one outstanding round while active)
    constrained: bool = False  # a grammar masks its sampling: completion feedback before its next round
    grammar: GrammarMatcher | None = None  # the constrained request's grammar: each sampling round's mask

    @property
    def needs_feedback(self) -> bool:
        return self.host_stop or self.constrained


@dataclass(frozen=True, slots=True)
class RoundPlan:
    """One submission: a graph over a cohort, in submission order."""

    sequence: int  # the transport's submission sequence this round must be answered with
    frame: int  # the execution frame (0, or 1 when two are in flight)
    graph: str  # graph handle name
    operation: int  # contract_pb2.Operation of the graph
    lanes: tuple[LaneInput, ...]  # one per request, submission order
    request_ids: tuple[str, ...]  # lanes[i] belongs to request_ids[i]
    page_table_updates: tuple[tuple[int, int, tuple[int, ...]], ...]  # (slot, first index, new entries)
    constrained_lanes: int  # lanes whose request is grammar-constrained
    outstanding: int  # rounds outstanding right after this submission, itself included

    def __post_init__(self) -> None:
        if len(self.lanes) != len(self.request_ids):
            raise ValueError("a round plan needs one request id per lane")


@dataclass(frozen=True, slots=True)
class LaneOutcome:
    """A retired lane that sampled: the validated token, ready for stops and observation."""

    request_id: str
    token: int  # the sampled id
    sampled: int  # tokens the request has sampled, this one included


class RoundOutcomes(ColumnRows):
    """A round's retired lanes that sampled, in lane order, as three columns (request ids, tokens, and
    each request's sampled count): the scheduler appends to them and the runtime reads them without a
    `LaneOutcome` per token. Indexing or iterating builds (and keeps) the `LaneOutcome`s; equal to any
    sequence of equal `LaneOutcome`s."""

    __slots__ = ("request_ids", "sampled", "tokens")

    def __init__(self) -> None:
        self.request_ids: list[str] = []
        self.tokens: list[int] = []
        self.sampled: list[int] = []
        self._rows: list[LaneOutcome] | None = None

    def add(self, request_id: str, token: int, sampled: int) -> None:
        if self._rows is not None:
            raise ValueError("round outcomes are complete once read")
        self.request_ids.append(request_id)
        self.tokens.append(token)
        self.sampled.append(sampled)

    def _build_rows(self) -> list[LaneOutcome]:
        return [LaneOutcome(*row) for row in zip(self.request_ids, self.tokens, self.sampled, strict=True)]

    def __len__(self) -> int:
        return len(self.tokens)
