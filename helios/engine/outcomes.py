"""A round's retired lanes as the scheduler hands them to token delivery (host side):
`LaneOutcome` and `RoundOutcomes`.

    outcomes = scheduler.complete(plan, rows)      # RoundOutcomes: a sequence of LaneOutcome, as columns
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.runtime.rows import ColumnRows


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

    __slots__ = ("prompt_scores", "request_ids", "sampled", "tokens")

    def __init__(self) -> None:
        # a SCORED_PREFILL round's prompt scores, (request id, PromptScoreEvent) in lane order: delivered
        # before the round's tokens
        self.prompt_scores: list[tuple[str, object]] = []
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
