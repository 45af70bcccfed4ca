"""Recipient-header frames with ATEM blocks (host side): REASONING_PARSER_RECIPIENT_HEADER paired
with TOOL_PARSER_ATEM.

Owns: the public forms (`PUBLIC_PROMPT`, `PUBLIC_REASONING`, `PUBLIC_SYNTAX`), `ReasoningText`,
`FrameState` and `initial_frame_state` (where generation starts, from the rendered prompt),
`atem_layout` and `RecipientFrameParser`, which consumes complete frames and returns reasoning,
content and tool-call events. The two identifiers are paired because one parser reads the frames.

    <|start|>assistant to=RECIPIENT<|message|>BODY<|eom|>

- `self` (`reasoning_recipient`): BODY is reasoning; `commentary` and `user` (`content_recipients`):
  BODY is visible content; a header without a recipient is content as well.
- `functions` (`tool_recipient`): BODY is one ATEM block whose invocation names a tool the request
  registered; `functions.NAME` (`tool_recipient` `tool_recipient_separator` NAME): the invocation must
  be NAME. A block whose invocation is not accepted is content, as written.
- A frame carries one invocation; parallel calls use consecutive frames. A later invocation in the
  same block is dropped.
- `<|eom|>` (`internal_end`) closes an internal message; another header may follow. A new header
  also ends an unterminated body. Generation ends only at the core's EOS ids, which never reach the
  parser.
- Header controls (`header_start`, `header_message`, `internal_end`) delimit frames only as marker
  pieces when the tokenizer encodes them as one token (`token_only`); otherwise they match as text.
- Any other recipient is content. Text outside frames is content; whitespace there is markup.

The ATEM block:

    <atem:function_calls>
    <atem:invoke name="NAME">
    <atem:parameter name="KEY">VALUE</atem:parameter>     schema-typed: strings bare, others JSON
    </atem:invoke>
    </atem:function_calls>
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from helios.frontend.detokenize import Piece
from helios.frontend.scan import find_first, held_suffix
from helios.frontend.syntaxes.tagged import (
    IncompleteToolSyntax,
    TaggedToolParser,
    TagLayout,
    invocation_layout,
)
from helios.frontend.tool_calls import ContentText, ToolEvent, parameter_schemas
from helios.proto import contract_pb2

PUBLIC_PROMPT = contract_pb2.PromptSyntax(
    assistant_open="<|start|>assistant",
    message_end="<|end|>",
    header_start="<|start|>",
    header_message="<|message|>",
    internal_end="<|eom|>",
)
PUBLIC_REASONING = contract_pb2.ReasoningSyntax(
    recipient_open=" to=",
    reasoning_recipient="self",
    content_recipients=["commentary", "user"],
    tool_recipient="functions",
    tool_recipient_separator=".",
)
PUBLIC_SYNTAX = contract_pb2.ToolSyntax(
    opener="<atem:function_calls>",
    closer="</atem:function_calls>",
    invoke_open='<atem:invoke name="',
    invoke_name_close='">',
    invoke_close="</atem:invoke>",
    parameter_open='<atem:parameter name="',
    parameter_name_close='">',
    parameter_close="</atem:parameter>",
    separator="\n",
)


@dataclass(frozen=True, slots=True)
class ReasoningText:
    text: str


RecipientEvent = ReasoningText | ToolEvent

BETWEEN, HEADER, BODY = "between", "header", "body"


@dataclass(frozen=True, slots=True)
class FrameState:
    """Where generation starts: between frames, inside a header (with its text so far), or inside
    a body (with its header's text)."""

    state: str = BETWEEN
    header: str = ""  # the header text after header_start, e.g. "assistant" or "assistant to=self"

    def __post_init__(self) -> None:
        if self.state not in (BETWEEN, HEADER, BODY):
            raise ValueError(f"frame state must be {BETWEEN}, {HEADER} or {BODY}, got {self.state!r}")


def initial_frame_state(prompt: str, frontend: contract_pb2.FrontendContract) -> FrameState:
    """The frame the rendered prompt leaves open. Only text after the last header start counts: an
    open `<|start|>assistant` header accepts the generated recipient suffix, and a header closed by
    `<|message|>` without a later message end starts generation inside that body.

        ...<|start|>assistant                       -> header "assistant"
        ...<|start|>assistant to=self<|message|>    -> body of "assistant to=self"
        ...<|start|>assistant to=self<|message|>x<|eom|>  -> between frames
    """
    p = frontend.prompt_syntax
    if not p.header_start:
        return FrameState()
    start = prompt.rfind(p.header_start)
    if start < 0:
        return FrameState()
    tail = prompt[start + len(p.header_start) :]
    cut = tail.find(p.header_message) if p.header_message else -1
    if cut < 0:
        return FrameState(HEADER, tail)
    body = tail[cut + len(p.header_message) :]
    if any(end and end in body for end in (p.internal_end, p.message_end)):
        return FrameState()
    return FrameState(BODY, tail[:cut])


def frame_recipient(header: str, frontend: contract_pb2.FrontendContract) -> str | None:
    """The recipient a frame header names ("assistant to=self" -> "self"), or None when the header
    is not the assistant role's or names no recipient."""
    p, r = frontend.prompt_syntax, frontend.reasoning_syntax
    role = p.assistant_open[len(p.header_start) :].strip() if p.assistant_open.startswith(p.header_start) else ""
    header = header.strip()
    marker = r.recipient_open.strip()
    if (role and not header.startswith(role)) or not marker or (index := header.find(marker)) < 0:
        return None
    words = header[index + len(marker) :].split()
    return words[0] if words else None


def atem_layout(syntax: contract_pb2.ToolSyntax) -> TagLayout:
    return invocation_layout(syntax, "TOOL_PARSER_ATEM", single_invocation=True)


class RecipientFrameParser:
    """Recipient-header frames over one response's pieces."""

    def __init__(
        self,
        frontend: contract_pb2.FrontendContract,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        parse_tools: bool = True,
        token_only: Set[str] = frozenset(),
        initial: FrameState = FrameState(),
    ) -> None:
        p, r = frontend.prompt_syntax, frontend.reasoning_syntax
        missing = [name for name, value in (
            ("prompt_syntax.header_start", p.header_start), ("prompt_syntax.header_message", p.header_message),
            ("prompt_syntax.internal_end", p.internal_end), ("reasoning_syntax.recipient_open", r.recipient_open),
            ("reasoning_syntax.reasoning_recipient", r.reasoning_recipient),
            ("reasoning_syntax.tool_recipient", r.tool_recipient)) if not value]  # fmt: skip
        if missing:
            raise IncompleteToolSyntax(f"REASONING_PARSER_RECIPIENT_HEADER: the syntax lacks {', '.join(missing)}")
        self._start, self._message, self._eom = p.header_start, p.header_message, p.internal_end
        self._frontend = frontend
        self._r = r
        self._layout = atem_layout(frontend.tool_syntax)
        self._tools = tools
        self._parse_tools = parse_tools
        self._registered = set(parameter_schemas(tools))
        self._token_only = frozenset(token_only)
        self._calls = 0
        self._buffer = ""
        self._kind = ""  # body: "reasoning", "content" or "tool"
        self._tool: TaggedToolParser | None = None
        self._between_started = False  # content was emitted in the current run outside frames
        self._state = initial.state
        self._header = initial.header
        if initial.state == BODY:
            self._open_body()

    @property
    def calls(self) -> int:
        """Tool calls started so far."""
        return self._tool.calls if self._tool is not None else self._calls

    def _text(self, control: str) -> bool:
        return control not in self._token_only

    # -- public ----------------------------------------------------------------------------------

    def feed(self, piece: Piece) -> list[RecipientEvent]:
        out: list[RecipientEvent] = []
        if piece.marker and piece.text in (self._start, self._message, self._eom) and not self._text(piece.text):
            self._control(piece.text, out)
        elif piece.marker and self._state == BODY and self._kind == "tool":
            self._flush_body(out)
            out.extend(self._tool.feed(piece))  # type: ignore[union-attr]
        else:
            self._buffer += piece.text
            self._drain(out)
        return out

    def finish(self) -> list[RecipientEvent]:
        out: list[RecipientEvent] = []
        if self._state == BODY:
            self._body_text(self._buffer, out)
            self._buffer = ""
            self._end_body(out)
        elif self._state == BETWEEN:
            self._between_text(out, final=True)
        self._buffer = ""
        self._state = BETWEEN
        return out

    # -- frames ----------------------------------------------------------------------------------

    def _control(self, control: str, out: list[RecipientEvent]) -> None:
        """A header control observed (as its token, or matched as text)."""
        if control == self._start:
            if self._state == BODY:
                self._flush_body(out)
                self._end_body(out)
            elif self._state == BETWEEN:
                self._between_text(out, final=True)
            self._buffer = ""
            self._state, self._header = HEADER, ""
        elif control == self._message and self._state == HEADER:
            self._header += self._buffer
            self._buffer = ""
            self._state = BODY
            self._open_body()
        elif control == self._eom and self._state == BODY:
            self._flush_body(out)
            self._end_body(out)
            self._state = BETWEEN
        elif self._state == BODY:
            self._buffer += control  # a control out of place inside a body is body text
            self._drain(out)
        # out of place between frames or in a header: markup, dropped

    def _open_body(self) -> None:
        recipient = frame_recipient(self._header, self._frontend)
        r = self._r
        named_prefix = r.tool_recipient + r.tool_recipient_separator if r.tool_recipient_separator else None
        self._tool = None
        if recipient == r.reasoning_recipient:
            self._kind = "reasoning"
        elif self._parse_tools and recipient == r.tool_recipient:
            self._kind = "tool"
            accept = (lambda name: name in self._registered) if self._registered else None
            self._tool = TaggedToolParser(self._layout, tools=self._tools, accept_name=accept,
                                          token_only=self._token_only, first_index=self._calls)  # fmt: skip
        elif self._parse_tools and named_prefix and recipient and recipient.startswith(named_prefix):
            named = recipient[len(named_prefix) :]
            self._kind = "tool"

            def accept(name: str) -> bool:
                return name == named and (not self._registered or name in self._registered)

            self._tool = TaggedToolParser(self._layout, tools=self._tools, accept_name=accept,
                                          token_only=self._token_only, first_index=self._calls)  # fmt: skip
        else:
            self._kind = "content"  # content recipients, a missing or an unknown recipient

    def _end_body(self, out: list[RecipientEvent]) -> None:
        if self._tool is not None:
            out.extend(self._tool.finish())
            self._calls = self._tool.calls
            self._tool = None
        self._kind = ""

    def _body_text(self, text: str, out: list[RecipientEvent]) -> None:
        if not text:
            return
        if self._kind == "reasoning":
            out.append(ReasoningText(text))
        elif self._kind == "tool":
            out.extend(self._tool.feed(Piece(text)))  # type: ignore[union-attr]
        else:
            out.append(ContentText(text))

    def _flush_body(self, out: list[RecipientEvent]) -> None:
        self._body_text(self._buffer, out)
        self._buffer = ""

    # -- text scanning ---------------------------------------------------------------------------

    def _drain(self, out: list[RecipientEvent]) -> None:
        while True:
            if self._state == BODY:
                ends = [c for c in (self._start, self._eom) if self._text(c)]
            elif self._state == HEADER:
                ends = [c for c in (self._start, self._message) if self._text(c)]
            else:
                ends = [self._start] if self._text(self._start) else []
            found = find_first(self._buffer, ends)
            if found is not None:
                index, control = found
                rest = self._buffer[index + len(control) :]
                self._buffer = self._buffer[:index]
                if self._state == BODY:
                    self._flush_body(out)
                elif self._state == BETWEEN:
                    self._between_text(out, final=True)
                self._control(control, out)
                self._buffer = rest
                continue
            keep = held_suffix(self._buffer, ends)
            if self._state == BODY:
                self._body_text(self._buffer[: len(self._buffer) - keep], out)
                self._buffer = self._buffer[len(self._buffer) - keep :]
            elif self._state == BETWEEN:
                self._between_text(out, final=False, keep=keep)
            return

    def _between_text(self, out: list[RecipientEvent], *, final: bool, keep: int = 0) -> None:
        """Text outside frames is content; whitespace at either end of such a run is markup."""
        release = self._buffer[: len(self._buffer) - keep]
        if not self._between_started:
            release = release.lstrip()
        text = release.rstrip()
        if text:
            out.append(ContentText(text))
            self._between_started = True
        self._buffer = "" if final else release[len(text) :] + self._buffer[len(self._buffer) - keep :]
        if final:
            self._between_started = False
