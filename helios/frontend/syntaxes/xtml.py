"""XTML (host side): TOOL_PARSER_XTML and its think reasoning, REASONING_PARSER_XTML_THINK.

Owns: `PUBLIC_SYNTAX` and `PUBLIC_REASONING` (the forms written down in docs/syntaxes.md),
`xtml_layout` (the tool syntax as a `TagLayout` of the shared tag engine) and
`XtmlThinkReasoningParser`.

XTML is an XML-tag tool syntax with its own interleaved think reasoning:

    <xtml:think>REASONING</xtml:think>           reasoning, at the start of the output or right
                                                 after a tool block (interleaved thinking)
    <xtml:tool_calls>                            opener (also the reasoning terminal marker)
    <xtml:invoke name="NAME">                    invoke_open NAME invoke_name_close
    <xtml:parameter name="KEY">VALUE</xtml:parameter>
    </xtml:invoke>                               several invocations a block: parallel calls
    </xtml:tool_calls>                           closer

Values are typed by the tool's schema (strings bare, other types JSON). The reasoning parser needs
the tool syntax, which is why the specification pairs the two: reasoning may reopen after each tool
block, so the parser follows tool blocks (opener to closer) through the answer, and a think tag
inside a block, e.g. in a string value, stays the block's text.
"""

from __future__ import annotations

from collections.abc import Set

from helios.frontend.detokenize import Piece
from helios.frontend.reasoning import ANSWER, REASONING
from helios.frontend.scan import find_first, held_suffix
from helios.frontend.syntaxes.tagged import IncompleteToolSyntax, TagLayout, invocation_layout
from helios.proto import contract_pb2

PUBLIC_SYNTAX = contract_pb2.ToolSyntax(
    opener="<xtml:tool_calls>",
    closer="</xtml:tool_calls>",
    invoke_open='<xtml:invoke name="',
    invoke_name_close='">',
    invoke_close="</xtml:invoke>",
    parameter_open='<xtml:parameter name="',
    parameter_name_close='">',
    parameter_close="</xtml:parameter>",
    separator="\n",
)

PUBLIC_REASONING = contract_pb2.ReasoningSyntax(
    open="<xtml:think>", close="</xtml:think>", terminal_marker="<xtml:tool_calls>"
)


def xtml_layout(syntax: contract_pb2.ToolSyntax) -> TagLayout:
    return invocation_layout(syntax, "TOOL_PARSER_XTML")


Output = list[tuple[str, Piece]]
_START, _REASONING, _ANSWER, _TOOL = "start", "reasoning", "answer", "tool"


class XtmlThinkReasoningParser:
    """REASONING_PARSER_XTML_THINK over one response's pieces: `(channel, Piece)` pairs out, as the
    think-tag parser returns them; answer pieces (tool blocks included) go on to the tool parser."""

    def __init__(
        self,
        syntax: contract_pb2.ReasoningSyntax,
        tool_syntax: contract_pb2.ToolSyntax,
        *,
        token_only: Set[str] = frozenset(),
        initially_open: bool = False,
    ) -> None:
        missing = [n for n, v in (("open", syntax.open), ("close", syntax.close),
                                  ("tool opener", tool_syntax.opener), ("tool closer", tool_syntax.closer)) if not v]  # fmt: skip
        if missing:
            raise IncompleteToolSyntax(f"REASONING_PARSER_XTML_THINK: the syntax lacks {', '.join(missing)}")
        self._open = syntax.open
        self._close = syntax.close
        self._opener = tool_syntax.opener  # the terminal marker, whatever `terminal_marker` repeats
        self._closer = tool_syntax.closer
        self._wrap = syntax.wrapping_newlines
        self._token_only = frozenset(token_only)
        self._buffer = ""
        self._state = _START
        self._lead = False  # reasoning: one leading newline is markup
        if initially_open:
            self._state = _REASONING
            self._lead = self._wrap

    def _text(self, delimiter: str) -> bool:
        return delimiter not in self._token_only

    # -- public ----------------------------------------------------------------------------------

    def feed(self, piece: Piece) -> Output:
        out: Output = []
        if piece.marker:
            self._marker(piece, out)
        else:
            self._buffer += piece.text
            self._drain(out)
        return out

    def finish(self) -> Output:
        out: Output = []
        if self._state == _REASONING:
            self._emit_reasoning(self._buffer, out, closing=False)
        elif self._buffer:
            out.append((ANSWER, Piece(self._buffer)))
        self._buffer = ""
        return out

    # -- states ----------------------------------------------------------------------------------

    def _marker(self, piece: Piece, out: Output) -> None:
        text = piece.text
        if self._state == _START and text == self._open and not self._text(self._open):
            self._buffer = ""
            self._state, self._lead = _REASONING, self._wrap
            return
        if self._state == _START:
            self._state = _ANSWER
            self._drain(out)
        if self._state == _REASONING:
            if text == self._close and not self._text(self._close):
                self._emit_reasoning(self._buffer, out, closing=True)
                self._buffer, self._state = "", _ANSWER
                return
            if text == self._opener and not self._text(self._opener):
                self._emit_reasoning(self._buffer, out, closing=True)
                self._buffer, self._state = "", _TOOL
                out.append((ANSWER, piece))
                return
            self._buffer += text
            self._drain(out)
            return
        if self._state == _ANSWER and text == self._close and not self._text(self._close):
            return  # a later close delimiter is protocol markup: dropped
        self._flush(out)
        out.append((ANSWER, piece))
        if self._state == _ANSWER and text == self._opener and not self._text(self._opener):
            self._state = _TOOL
        elif self._state == _TOOL and text == self._closer and not self._text(self._closer):
            self._state = _START

    def _drain(self, out: Output) -> None:
        while True:
            if self._state == _START:
                if not self._drain_start():
                    return
            elif self._state == _REASONING:
                if not self._drain_reasoning(out):
                    return
            elif self._state == _ANSWER:
                if not self._drain_answer(out):
                    return
            elif not self._drain_tool(out):
                return

    def _drain_start(self) -> bool:
        stripped = self._buffer.lstrip()
        if not stripped:
            return False
        if self._text(self._open):
            if stripped.startswith(self._open):
                self._buffer = stripped[len(self._open) :]
                self._state, self._lead = _REASONING, self._wrap
                return True
            if self._open.startswith(stripped):
                return False
        self._state = _ANSWER
        return True

    def _drain_reasoning(self, out: Output) -> bool:
        ends = [d for d in (self._close, self._opener) if self._text(d)]
        found = find_first(self._buffer, ends)
        if found is not None:
            index, delimiter = found
            self._emit_reasoning(self._buffer[:index], out, closing=True)
            if delimiter == self._close:
                self._buffer = self._buffer[index + len(delimiter) :]
                self._state = _ANSWER
            else:
                self._buffer = self._buffer[index:]
                self._state = _ANSWER  # the answer state moves into the tool block
            return True
        keep = held_suffix(self._buffer, ends)
        release = self._buffer[: len(self._buffer) - keep]
        if self._wrap and release.endswith("\n"):
            release = release[:-1]  # may be the wrapping newline before the close delimiter
        self._emit_reasoning(release, out, closing=False)
        self._buffer = self._buffer[len(release) :]
        return False

    def _drain_answer(self, out: Output) -> bool:
        ends = [d for d in (self._opener, self._close) if self._text(d)]
        found = find_first(self._buffer, ends)
        if found is not None:
            index, delimiter = found
            if index:
                out.append((ANSWER, Piece(self._buffer[:index])))
            if delimiter == self._close:
                self._buffer = self._buffer[index + len(delimiter) :]  # later close: markup, dropped
            else:
                out.append((ANSWER, Piece(delimiter)))
                self._buffer = self._buffer[index + len(delimiter) :]
                self._state = _TOOL
            return True
        keep = held_suffix(self._buffer, ends)
        if len(self._buffer) > keep:
            out.append((ANSWER, Piece(self._buffer[: len(self._buffer) - keep])))
            self._buffer = self._buffer[len(self._buffer) - keep :]
        return False

    def _drain_tool(self, out: Output) -> bool:
        if not self._text(self._closer):
            self._flush(out)
            return False
        found = find_first(self._buffer, [self._closer])
        if found is not None:
            end = found[0] + len(self._closer)
            out.append((ANSWER, Piece(self._buffer[:end])))
            self._buffer = self._buffer[end:]
            self._state = _START
            return True
        keep = held_suffix(self._buffer, [self._closer])
        if len(self._buffer) > keep:
            out.append((ANSWER, Piece(self._buffer[: len(self._buffer) - keep])))
            self._buffer = self._buffer[len(self._buffer) - keep :]
        return False

    def _flush(self, out: Output) -> None:
        if self._state == _START:
            self._state = _ANSWER
        if self._buffer:
            out.append((ANSWER, Piece(self._buffer)))
            self._buffer = ""

    def _emit_reasoning(self, text: str, out: Output, *, closing: bool) -> None:
        if self._lead and text:
            self._lead = False
            if text.startswith("\n"):
                text = text[1:]
        if closing and self._wrap and text.endswith("\n"):
            text = text[:-1]
        if text:
            out.append((REASONING, Piece(text)))
