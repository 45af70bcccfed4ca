"""The OutputPipeline (host side): visible output pieces in, OpenAI-shaped deltas out.

Owns: `OutputPipeline` (reasoning parser, then tool parser, selected by the frontend contract's
enums and built from its syntax data, `helios.frontend.syntaxes.selection`; recipient-header frames
go through their one frame parser; no model names), the delta types (`Delta`, `ToolCallDelta`),
the aggregated result (`ParsedOutput`, `ToolCall`) and `OutputAccumulator`, which folds deltas into
the result. A streamed response sends the deltas; a non-streamed one sends their accumulation, so
both carry the same reasoning, content and tool calls for every way the output was split.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable, Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any

from helios.errors import HeliosError
from helios.frontend.detokenize import Piece
from helios.frontend.reasoning import REASONING
from helios.frontend.structured import StructuredAnswerGate
from helios.frontend.syntaxes.recipient import FrameState, ReasoningText, RecipientFrameParser
from helios.frontend.syntaxes.selection import reasoning_parser_for, tool_parser_for
from helios.frontend.tool_calls import ContentText, ToolCallArguments, ToolCallStart
from helios.proto import contract_pb2


class UnsupportedParser(HeliosError):
    """The frontend contract selects a parser this build does not implement."""


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    index: int  # the call's position in the response
    id: str | None = None  # sent once, with the name
    name: str | None = None
    arguments: str = ""  # the next fragment of the arguments JSON


@dataclass(frozen=True, slots=True)
class Delta:
    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()

    def __post_init__(self) -> None:
        if sum(bool(x) for x in (self.reasoning, self.content, self.tool_calls)) != 1:
            raise ValueError("a Delta carries exactly one of reasoning, content or tool calls")


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON object text


@dataclass(frozen=True, slots=True)
class ParsedOutput:
    reasoning: str | None
    content: str | None
    tool_calls: tuple[ToolCall, ...]


@dataclass(slots=True)
class OutputAccumulator:
    """Folds deltas into the response a non-streaming client receives."""

    reasoning: list[str] = field(default_factory=list)
    content: list[str] = field(default_factory=list)
    calls: dict[int, list[str]] = field(default_factory=dict)  # index -> [id, name, arguments...]

    def add(self, deltas: Iterable[Delta]) -> None:
        for delta in deltas:
            if delta.reasoning:
                self.reasoning.append(delta.reasoning)
            if delta.content:
                self.content.append(delta.content)
            for call in delta.tool_calls:
                parts = self.calls.setdefault(call.index, ["", ""])
                if call.id is not None:
                    parts[0] = call.id
                if call.name is not None:
                    parts[1] = call.name
                parts.append(call.arguments)

    def result(self) -> ParsedOutput:
        calls = tuple(
            ToolCall(id=parts[0], name=parts[1], arguments="".join(parts[2:]))
            for _, parts in sorted(self.calls.items())
        )
        return ParsedOutput(
            reasoning="".join(self.reasoning) or None,
            content="".join(self.content) or None,
            tool_calls=calls,
        )


def new_tool_call_id() -> str:
    return "call_" + secrets.token_hex(12)


class OutputPipeline:
    """Reasoning and tool parsing of one response."""

    def __init__(
        self,
        frontend: contract_pb2.FrontendContract,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        parse_tools: bool = True,
        token_only: Set[str] = frozenset(),
        reasoning_open: bool = False,
        frame: FrameState | None = None,
        structured: bool = False,
        id_factory: Callable[[], str] = new_tool_call_id,
    ) -> None:
        self._frames: RecipientFrameParser | None = None
        if frontend.reasoning_parser == contract_pb2.REASONING_PARSER_RECIPIENT_HEADER:
            # one parser consumes complete recipient frames: reasoning, content and ATEM calls
            self._frames = RecipientFrameParser(
                frontend, tools=tools, parse_tools=parse_tools, token_only=token_only, initial=frame or FrameState()
            )
        else:
            self._reasoning: Any = reasoning_parser_for(
                frontend, token_only=token_only, reasoning_open=reasoning_open
            )
            if self._reasoning is None:
                raise UnsupportedParser(f"reasoning parser {frontend.reasoning_parser} is not implemented")
            self._tools: Any = tool_parser_for(frontend, tools=tools, parse_tools=parse_tools, token_only=token_only)
            if self._tools is None:
                raise UnsupportedParser(f"tool parser {frontend.tool_parser} is not implemented")
            if structured:
                # a structured answer is an opaque document: tool calls only where it opens with one
                self._tools = StructuredAnswerGate(self._tools, frontend.tool_syntax.opener)
        self._id_factory = id_factory

    @property
    def tool_calls(self) -> int:
        """Tool calls started so far."""
        return self._frames.calls if self._frames is not None else self._tools.calls

    def feed(self, pieces: Iterable[Piece]) -> list[Delta]:
        out: list[Delta] = []
        for piece in pieces:
            if self._frames is not None:
                self._emit(self._frames.feed(piece), out)
            else:
                self._route(self._reasoning.feed(piece), out)
        return _merge(out)

    def finish(self) -> list[Delta]:
        out: list[Delta] = []
        if self._frames is not None:
            self._emit(self._frames.finish(), out)
        else:
            self._route(self._reasoning.finish(), out)
            self._emit(self._tools.finish(), out)
        return _merge(out)

    def _route(self, routed: list[tuple[str, Piece]], out: list[Delta]) -> None:
        for channel, piece in routed:
            if channel == REASONING:
                out.append(Delta(reasoning=piece.text))
            else:
                self._emit(self._tools.feed(piece), out)

    def _emit(self, events: list[Any], out: list[Delta]) -> None:
        for event in events:
            if isinstance(event, ContentText):
                if event.text:
                    out.append(Delta(content=event.text))
            elif isinstance(event, ReasoningText):
                if event.text:
                    out.append(Delta(reasoning=event.text))
            elif isinstance(event, ToolCallStart):
                call = ToolCallDelta(event.index, id=self._id_factory(), name=event.name, arguments="")
                out.append(Delta(tool_calls=(call,)))
            elif isinstance(event, ToolCallArguments):
                out.append(Delta(tool_calls=(ToolCallDelta(event.index, arguments=event.fragment),)))


def _merge(deltas: list[Delta]) -> list[Delta]:
    """Joins neighbouring deltas of the same kind (fewer SSE chunks, same accumulation)."""
    merged: list[Delta] = []
    for delta in deltas:
        last = merged[-1] if merged else None
        if last is not None and delta.reasoning and last.reasoning:
            merged[-1] = Delta(reasoning=last.reasoning + delta.reasoning)
        elif last is not None and delta.content and last.content:
            merged[-1] = Delta(content=last.content + delta.content)
        elif (
            last is not None
            and delta.tool_calls
            and last.tool_calls
            and delta.tool_calls[0].index == last.tool_calls[-1].index
            and delta.tool_calls[0].id is None
        ):
            previous = last.tool_calls[-1]
            joined = ToolCallDelta(
                previous.index, previous.id, previous.name, previous.arguments + delta.tool_calls[0].arguments
            )
            merged[-1] = Delta(tool_calls=last.tool_calls[:-1] + (joined,))
        else:
            merged.append(delta)
    return merged


def parse_text(
    text: str,
    frontend: contract_pb2.FrontendContract,
    *,
    tools: Sequence[Mapping[str, Any]] | None = None,
    reasoning_open: bool = False,
    frame: FrameState | None = None,
    id_factory: Callable[[], str] = new_tool_call_id,
) -> ParsedOutput:
    """Parse a whole model output given as plain text (no token boundaries: every delimiter is
    matched as text). What `helios parse` prints."""
    pipeline = OutputPipeline(
        frontend, tools=tools, reasoning_open=reasoning_open, frame=frame, id_factory=id_factory
    )
    accumulator = OutputAccumulator()
    accumulator.add(pipeline.feed([Piece(text)] if text else []))
    accumulator.add(pipeline.finish())
    return accumulator.result()
