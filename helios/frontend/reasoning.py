"""Reasoning parsers (host side): split decoded output into reasoning and answer text.

Owns: `ThinkReasoningParser` (REASONING_PARSER_THINK, think tags) and `NoReasoningParser`
(REASONING_PARSER_NONE). A parser takes `Piece`s and returns `(channel, Piece)` pairs, channel
"reasoning" or "answer"; answer pieces (markers kept) go on to the tool parser.

Think-tag rules, from the syntax data (`ReasoningSyntax`) and the specification:
- reasoning starts open when the prompt opened it (Bootstrap's initial reasoning state), or when
  the output begins (after optional whitespace) with the open delimiter;
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

from helios.frontend.detokenize import Piece
from helios.frontend.scan import find_first, held_suffix
from helios.proto import contract_pb2

REASONING = "reasoning"
ANSWER = "answer"

_START, _REASONING, _ANSWER = "start", "reasoning", "answer"

Output = list[tuple[str, Piece]]


class NoReasoningParser:
    """REASONING_PARSER_NONE: everything is answer."""

    def feed(self, piece: Piece) -> Output:
        return [(ANSWER, piece)]

    def finish(self) -> Output:
        return []


class ThinkReasoningParser:
    """REASONING_PARSER_THINK over one response's pieces."""

    def __init__(
        self,
        syntax: contract_pb2.ReasoningSyntax,
        *,
        token_only: Set[str] = frozenset(),
        initially_open: bool = False,
    ) -> None:
        self._open = syntax.open
        self._close = syntax.close
        self._terminal = syntax.terminal_marker
        self._wrap = syntax.wrapping_newlines
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

    def _enter_reasoning(self) -> None:
        self._state = _REASONING
        self._lead = self._wrap

    def _enter_answer(self, *, after_close: bool) -> None:
        self._state = _ANSWER
        self._lead = after_close and self._wrap

    def _marker(self, piece: Piece, out: Output) -> None:
        text = piece.text
        if self._state == _START:
            if text == self._open and not self._text_mode(self._open):
                self._buffer = ""
                self._enter_reasoning()
                return
            self._enter_answer(after_close=False)
            self._drain(out)
        if self._state == _REASONING:
            if text == self._close and not self._text_mode(self._close):
                self._emit_reasoning(self._buffer, out, closing=True)
                self._buffer = ""
                self._enter_answer(after_close=True)
                return
            if text == self._terminal and not self._text_mode(self._terminal):
                self._emit_reasoning(self._buffer, out, closing=True)
                self._buffer = ""
                self._enter_answer(after_close=False)
                out.append((ANSWER, piece))
                return
            self._buffer += text  # another delimiter token inside reasoning is reasoning text
            self._drain(out)
            return
        # answer
        if text == self._close and not self._text_mode(self._close):
            return  # a later close delimiter is protocol markup: dropped
        self._flush_answer(out)
        self._lead = False
        out.append((ANSWER, piece))

    def _drain(self, out: Output) -> None:
        while True:
            if self._state == _START:
                if not self._drain_start(out):
                    return
            elif self._state == _REASONING:
                if not self._drain_reasoning(out):
                    return
            else:
                self._drain_answer(out)
                return

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
                self._buffer = delimiter + rest
                self._enter_answer(after_close=False)
            return True
        keep = held_suffix(self._buffer, ends)
        release = self._buffer[: len(self._buffer) - keep]
        if self._wrap and release.endswith("\n"):
            release = release[:-1]  # may be the wrapping newline before the close delimiter
        self._emit_reasoning(release, out, closing=False)
        self._buffer = self._buffer[len(release) :]
        return False

    def _drain_answer(self, out: Output) -> None:
        if self._lead:
            self._buffer = self._buffer.lstrip("\n")
            if not self._buffer:
                return
            self._lead = False
        if not self._text_mode(self._close):
            self._flush_answer(out)
            return
        while (found := find_first(self._buffer, [self._close])) is not None:
            index, delimiter = found
            if index:
                out.append((ANSWER, Piece(self._buffer[:index])))
            self._buffer = self._buffer[index + len(delimiter) :]  # later close: markup, dropped
        keep = held_suffix(self._buffer, [self._close])
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
