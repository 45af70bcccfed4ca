"""Think-tag reasoning (host side): split decoded output into reasoning and answer text.

Owns: `ThinkLayout` (the delimiters of one think-tag reasoning syntax, from the contract's syntax
data), `think_layout` (REASONING_PARSER_THINK's), `ThinkReasoningParser` (the one parser of every
think-tag syntax: REASONING_PARSER_THINK, and REASONING_PARSER_XTML_THINK through
`helios.frontend.syntaxes.xtml.xtml_think_layout`) and `NoReasoningParser` (REASONING_PARSER_NONE).
A parser takes `Piece`s and returns `(channel, Piece)` pairs, channel "reasoning" or "answer"; answer
pieces (markers kept) go on to the tool parser.

Rules, from the layout and the specification:
- reasoning starts open when the prompt opened it (Bootstrap's initial reasoning state), or when
  the output begins (after optional whitespace) with the open delimiter;
- interleaved thinking (a layout with `tool_closer`): reasoning may open again, the same way, right
  after each tool block; the parser follows the blocks (terminal marker to tool closer) through the
  answer, and a think tag inside a block, e.g. in a string value, stays block text;
- the close delimiter ends reasoning once; a later close delimiter is markup and is dropped;
- the terminal marker (the tool syntax's opener) ends reasoning implicitly and stays in the answer,
  where the tool parser sees it;
- a delimiter the tokenizer encodes as one token (`token_only`) counts only as a marker piece, i.e.
  when generated as that token; its plain-text spelling stays text;
- wrapping newlines: one newline after the open delimiter and one before the close (or terminal)
  delimiter belong to the markup, as do the newlines that follow the close delimiter.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass

from helios.frontend.detokenize import Piece
from helios.frontend.scan import find_first, held_suffix
from helios.proto import contract_pb2

REASONING = "reasoning"
ANSWER = "answer"

_START, _REASONING, _ANSWER, _TOOL_BLOCK = "start", "reasoning", "answer", "tool block"

Output = list[tuple[str, Piece]]


@dataclass(frozen=True, slots=True)
class ThinkLayout:
    """The delimiters of one think-tag reasoning syntax."""

    open: str
    close: str
    terminal_marker: str = ""  # ends reasoning implicitly and stays in the answer: the tool opener
    tool_closer: str = ""  # interleaved thinking: the tool block's closer, after which reasoning may
    # open again (the block runs from terminal_marker to it); "": reasoning only at the start
    wrapping_newlines: bool = False


def think_layout(frontend: contract_pb2.FrontendContract) -> ThinkLayout:
    """REASONING_PARSER_THINK: the reasoning syntax as the contract declares it."""
    syntax = frontend.reasoning_syntax
    return ThinkLayout(open=syntax.open, close=syntax.close, terminal_marker=syntax.terminal_marker,
                       wrapping_newlines=syntax.wrapping_newlines)  # fmt: skip


class NoReasoningParser:
    """REASONING_PARSER_NONE: everything is answer."""

    def feed(self, piece: Piece) -> Output:
        return [(ANSWER, piece)]

    def finish(self) -> Output:
        return []


class ThinkReasoningParser:
    """One response's pieces through one `ThinkLayout`."""

    def __init__(
        self,
        layout: ThinkLayout,
        *,
        token_only: Set[str] = frozenset(),
        initially_open: bool = False,
    ) -> None:
        self._open = layout.open
        self._close = layout.close
        self._terminal = layout.terminal_marker
        # the tool blocks the parser follows (interleaved thinking); "" and "": none
        self._block_open = layout.terminal_marker if layout.tool_closer else ""
        self._block_close = layout.tool_closer
        self._wrap = layout.wrapping_newlines
        self._token_only = frozenset(token_only)
        self._buffer = ""
        self._state = _START
        self._lead = False  # reasoning: drop one leading newline; answer: drop leading newlines
        if initially_open:
            self._enter_reasoning()

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
        if self._buffer:
            channel = REASONING if self._state == _REASONING else ANSWER
            text = self._strip_lead(self._buffer) if self._state == _REASONING else self._buffer
            if self._state == _ANSWER and self._lead:
                text = text.lstrip("\n")
            if text:
                out.append((channel, Piece(text)))
            self._buffer = ""
        return out

    # -- states ----------------------------------------------------------------------------------

    def _text_mode(self, delimiter: str) -> bool:
        return bool(delimiter) and delimiter not in self._token_only

    def _is_token(self, text: str, delimiter: str) -> bool:
        """A marker piece `text` is `delimiter` generated as its token."""
        return text == delimiter and not self._text_mode(delimiter)

    def _enter_reasoning(self) -> None:
        self._state = _REASONING
        self._lead = self._wrap

    def _enter_answer(self, *, after_close: bool) -> None:
        self._state = _ANSWER
        self._lead = after_close and self._wrap

    def _marker(self, piece: Piece, out: Output) -> None:
        text = piece.text
        if self._state == _START:
            if self._is_token(text, self._open):
                self._buffer = ""
                self._enter_reasoning()
                return
            self._enter_answer(after_close=False)
            self._drain(out)
        if self._state == _REASONING:
            if self._is_token(text, self._close):
                self._emit_reasoning(self._buffer, out, closing=True)
                self._buffer = ""
                self._enter_answer(after_close=True)
                return
            if self._is_token(text, self._terminal):
                self._emit_reasoning(self._buffer, out, closing=True)
                self._buffer = ""
                self._enter_answer(after_close=False)
                if self._block_close:
                    self._state = _TOOL_BLOCK
                out.append((ANSWER, piece))
                return
            self._buffer += text  # another delimiter token inside reasoning is reasoning text
            self._drain(out)
            return
        if self._state == _ANSWER and self._is_token(text, self._close):
            return  # a later close delimiter is protocol markup: dropped
        self._flush_answer(out)
        self._lead = False
        out.append((ANSWER, piece))
        if self._state == _ANSWER and self._is_token(text, self._block_open):
            self._state = _TOOL_BLOCK
        elif self._state == _TOOL_BLOCK and self._is_token(text, self._block_close):
            self._state = _START

    def _drain(self, out: Output) -> None:
        step = {
            _START: self._drain_start, _REASONING: self._drain_reasoning, _ANSWER: self._drain_answer,
            _TOOL_BLOCK: self._drain_tool_block,
        }  # fmt: skip
        while step[self._state](out):
            pass

    def _drain_start(self, out: Output) -> bool:
        stripped = self._buffer.lstrip()
        if not stripped:
            return False
        if self._text_mode(self._open):
            if stripped.startswith(self._open):
                self._buffer = stripped[len(self._open) :]
                self._enter_reasoning()
                return True
            if self._open.startswith(stripped):
                return False
        self._enter_answer(after_close=False)
        return True

    def _drain_reasoning(self, out: Output) -> bool:
        ends = [d for d in (self._close, self._terminal) if self._text_mode(d)]
        found = find_first(self._buffer, ends)
        if found is not None:
            index, delimiter = found
            self._emit_reasoning(self._buffer[:index], out, closing=True)
            rest = self._buffer[index + len(delimiter) :]
            if delimiter == self._close:
                self._buffer = rest
                self._enter_answer(after_close=True)
            else:
                self._buffer = delimiter + rest  # the answer reads the terminal marker
                self._enter_answer(after_close=False)
            return True
        keep = held_suffix(self._buffer, ends)
        release = self._buffer[: len(self._buffer) - keep]
        if self._wrap and release.endswith("\n"):
            release = release[:-1]  # may be the wrapping newline before the close delimiter
        self._emit_reasoning(release, out, closing=False)
        self._buffer = self._buffer[len(release) :]
        return False

    def _drain_answer(self, out: Output) -> bool:
        if self._lead:
            self._buffer = self._buffer.lstrip("\n")
            if not self._buffer:
                return False
            self._lead = False
        ends = [d for d in (self._close, self._block_open) if self._text_mode(d)]
        found = find_first(self._buffer, ends)
        if found is not None:
            index, delimiter = found
            if index:
                out.append((ANSWER, Piece(self._buffer[:index])))
            self._buffer = self._buffer[index + len(delimiter) :]
            if delimiter == self._close:
                return True  # a later close delimiter is markup: dropped
            out.append((ANSWER, Piece(delimiter)))
            self._state = _TOOL_BLOCK
            return True
        self._release_held(ends, out)
        return False

    def _drain_tool_block(self, out: Output) -> bool:
        if not self._text_mode(self._block_close):
            self._flush_answer(out)  # the closer counts only as its marker piece
            return False
        found = find_first(self._buffer, [self._block_close])
        if found is not None:
            end = found[0] + len(self._block_close)
            out.append((ANSWER, Piece(self._buffer[:end])))
            self._buffer = self._buffer[end:]
            self._state = _START
            return True
        self._release_held([self._block_close], out)
        return False

    def _release_held(self, ends: list[str], out: Output) -> None:
        """Answer text but a held suffix that may begin one of `ends`."""
        keep = held_suffix(self._buffer, ends)
        if len(self._buffer) > keep:
            out.append((ANSWER, Piece(self._buffer[: len(self._buffer) - keep])))
            self._buffer = self._buffer[len(self._buffer) - keep :]

    def _flush_answer(self, out: Output) -> None:
        if self._buffer:
            out.append((ANSWER, Piece(self._buffer)))
            self._buffer = ""

    def _strip_lead(self, text: str) -> str:
        if self._lead and text:
            self._lead = False
            if text.startswith("\n"):
                return text[1:]
        return text

    def _emit_reasoning(self, text: str, out: Output, *, closing: bool) -> None:
        text = self._strip_lead(text)
        if closing and self._wrap and text.endswith("\n"):
            text = text[:-1]
        if text:
            out.append((REASONING, Piece(text)))
