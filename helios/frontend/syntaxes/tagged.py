"""The incremental engine of tag-delimited tool syntaxes (host side), shared by Qwen Coder, GLM, DSML,
XTML and the ATEM blocks of recipient frames.

Owns: `TagLayout` (one syntax's delimiters, read from its `ToolSyntax`, and its reading options;
every string is data, none is hard-coded here), `read_layout` and `invocation_layout` (a
`ToolSyntax` read as a layout; the latter for the syntaxes whose blocks hold named invocations) and
`TaggedToolParser` (answer pieces in, `ContentText` / `ToolCallStart` / `ToolCallArguments` events
out, the events of `helios.frontend.tool_calls`).

The shape every such syntax shares, with the layout's names:

    opener                                     starts a block (a marker piece when token-only)
      invoke_open NAME invoke_name_close       an invocation (GLM: no invoke_open, NAME follows the
                                               opener and ends at invoke_name_close, the first
                                               parameter_open or the closer)
        parameter_open KEY parameter_name_close
          [flag_open FLAG flag_close]          DSML: FLAG == string_flag marks a bare string, any
                                               other FLAG a JSON value
          [value_open]                         GLM: the value is tagged
          VALUE value_close                    only the value's own close tag ends it, so any other
                                               tag inside a value is value text (with
                                               implied_value_close, Qwen Coder: also the next
                                               parameter_open, invoke_close or closer)
      invoke_close                             (GLM: none, the closer ends the invocation; a
                                               missing invoke_close is implied by the closer)
    closer

Whitespace and `separator` between elements are markup. Without a flag a value is typed by the
tool's JSON schema: a string parameter (or one without a schema) is taken as written and streams as
it arrives; any other type is JSON (or a scalar spelled bare) and is converted when complete. A call's
start is reported once its name is complete and accepted; its arguments follow as fragments whose
concatenation is the final JSON object. Whitespace after a call is dropped; a block that never names
a call is content after all (its opener as written, the text after it read again as content). Every
decision is a function of the text seen so far plus a held suffix that may still begin a delimiter,
so any splitting of the output gives the same events.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from helios.errors import HeliosError
from helios.frontend.detokenize import Piece
from helios.frontend.scan import find_first, held_suffix, json_string_fragment
from helios.frontend.tool_calls import (
    MAX_NAME_CHARS,
    ContentText,
    ToolCallArguments,
    ToolCallStart,
    ToolEvent,
    convert_parameter,
    parameter_schemas,
    streams_as_string,
)
from helios.proto import contract_pb2


class IncompleteToolSyntax(HeliosError):
    """The contract's ToolSyntax lacks a delimiter its parser needs (the message names the field)."""


@dataclass(frozen=True, slots=True)
class TagLayout:
    """The delimiters of one tag-delimited tool syntax, and how its values end."""

    opener: str
    closer: str
    parameter_open: str
    parameter_name_close: str
    value_close: str  # ends a parameter value
    invoke_open: str = ""  # "": the block holds one invocation whose name follows the opener
    invoke_name_close: str = ""  # "": the name ends at the first parameter_open or closer
    invoke_close: str = ""  # "": the invocation ends at the block closer
    flag_open: str = ""  # precedes a value-type flag
    flag_close: str = ""  # ends the flag
    string_flag: str = ""  # the flag of a bare string value
    json_flag: str = ""  # the flag a grammar writes for a JSON value (any other flag reads as JSON)
    value_open: str = ""  # precedes a value where the syntax tags values
    separator: str = ""
    wrapping_newlines: bool = False
    single_invocation: bool = False  # a block carries at most one invocation (later ones are dropped)
    implied_value_close: bool = False  # a missing value_close is implied by the next parameter_open,
    # invoke_close or closer, which then ends the value (those tags are not value text)
    syntax: str = "tool syntax"  # the syntax's name, for messages

    def __post_init__(self) -> None:
        required = ["opener", "closer", "parameter_open", "parameter_name_close", "value_close"]
        if self.invoke_open:
            required += ["invoke_name_close", "invoke_close"]
        if self.flag_open:
            required += ["flag_close", "string_flag", "json_flag"]
        missing = [name for name in required if not getattr(self, name)]
        if missing:
            raise IncompleteToolSyntax(f"{self.syntax}: the tool syntax lacks {', '.join(missing)}")


# the ToolSyntax fields every tag syntax reads, each into the TagLayout field of the same name
_SHARED_FIELDS = ("opener", "closer", "invoke_name_close", "parameter_open", "parameter_name_close", "separator",
                  "wrapping_newlines")  # fmt: skip


def read_layout(syntax: contract_pb2.ToolSyntax, name: str, **fields: Any) -> TagLayout:
    """A `ToolSyntax` read as the `TagLayout` of syntax `name`: the fields every tag syntax reads, as
    the contract gives them, plus `fields`, the layout fields the syntax sets from its other
    ToolSyntax fields and its reading options."""
    shared = {field: getattr(syntax, field) for field in _SHARED_FIELDS}
    return TagLayout(**shared, syntax=name, **fields)


def invocation_layout(syntax: contract_pb2.ToolSyntax, name: str, **options: Any) -> TagLayout:
    """The layout of a syntax whose blocks hold `invoke_open NAME invoke_name_close` invocations and
    whose values end at `parameter_close` (Qwen Coder, DSML, XTML, ATEM). `options`: the further
    `TagLayout` fields the syntax sets (DSML's flags, a one-invocation block, an implied close)."""
    return read_layout(syntax, name, invoke_open=syntax.invoke_open, invoke_close=syntax.invoke_close,
                       value_close=syntax.parameter_close, **options)  # fmt: skip


def _too_long(found: tuple[int, str] | None, text: str, close: str) -> bool:
    """A name-like field (parameter name, flag) whose close tag lies, or can only lie, past
    MAX_NAME_CHARS: the same verdict however the text was split."""
    if found is not None:
        return found[0] > MAX_NAME_CHARS
    return len(text) > MAX_NAME_CHARS + len(close)


_CONTENT, _BLOCK, _NAME, _PARAMS, _KEY, _FLAG, _PREVALUE, _VALUE = (
    "content", "block", "name", "params", "key", "flag", "prevalue", "value",
)  # fmt: skip


class TaggedToolParser:
    """One response's answer pieces through one `TagLayout`."""

    def __init__(
        self,
        layout: TagLayout,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        token_only: Set[str] = frozenset(),
        accept_name: Callable[[str], bool] | None = None,
        first_index: int = 0,
    ) -> None:
        self._l = layout
        self._accept_name = accept_name
        self._opener_text_mode = layout.opener not in token_only
        implied = (layout.parameter_open, layout.invoke_close, layout.closer) if layout.implied_value_close else ()
        self._value_ends = [layout.value_close, *(d for d in implied if d)]
        self._schemas = parameter_schemas(tools)
        self._buffer = ""
        self._state = _CONTENT
        self._after_call = False  # content right after a call: whitespace is dropped
        self._raw = ""  # the current block's text before it named a call (its content fallback)
        self._block_calls = 0  # calls named in the current block
        self._call_open = False
        self._calls = first_index
        self._name = ""
        self._params = 0  # parameters emitted for the current call
        self._key = ""
        self._flag: str | None = None
        self._value = ""  # a non-string value's text so far
        self._value_is_string = True
        self._value_lead = False

    # -- public ----------------------------------------------------------------------------------

    @property
    def calls(self) -> int:
        """Index of the next call (calls started so far plus `first_index`)."""
        return self._calls

    def feed(self, piece: Piece) -> list[ToolEvent]:
        out: list[ToolEvent] = []
        if (
            piece.marker
            and self._state == _CONTENT
            and piece.text == self._l.opener
            and not self._opener_text_mode
        ):
            self._flush_content(out, final=True)
            self._open_block(piece.text)
            return out
        self._buffer += piece.text
        if self._state in (_BLOCK, _NAME) and not self._block_calls:
            self._raw += piece.text
        self._drain(out)
        return out

    def finish(self) -> list[ToolEvent]:
        """End of output: a truncated call is closed with the parameters complete so far (and a
        truncated string value as far as it went); a block that named no call is content."""
        out: list[ToolEvent] = []
        if self._state == _CONTENT:
            self._flush_content(out, final=True)
        elif self._state in (_BLOCK, _NAME) and not self._block_calls:
            out.append(ContentText(self._raw))
        elif self._state == _VALUE:
            self._end_value(self._buffer, out)
        if self._call_open:
            self._end_call(out)
        self._buffer = ""
        self._raw = ""
        self._state = _CONTENT
        return [event for event in out if not isinstance(event, ContentText) or event.text]

    # -- states ----------------------------------------------------------------------------------

    def _drain(self, out: list[ToolEvent]) -> None:
        step = {
            _CONTENT: self._drain_content, _BLOCK: self._drain_block, _NAME: self._drain_name,
            _PARAMS: self._drain_params, _KEY: self._drain_key, _FLAG: self._drain_flag,
            _PREVALUE: self._drain_prevalue, _VALUE: self._drain_value,
        }  # fmt: skip
        while step[self._state](out):
            pass

    def _drain_content(self, out: list[ToolEvent]) -> bool:
        if self._opener_text_mode:
            found = find_first(self._buffer, [self._l.opener])
            if found is not None:
                index, opener = found
                rest = self._buffer[index + len(opener) :]
                self._buffer = self._buffer[:index]
                self._flush_content(out, final=True)
                self._open_block(opener)
                self._buffer = rest
                self._raw += rest
                return True
        self._flush_content(out, final=False)
        return False

    def _drain_block(self, out: list[ToolEvent]) -> bool:
        text = self._skip_separators()
        if not text:
            self._buffer = ""
            return False
        layout = self._l
        if text.startswith(layout.closer):
            self._buffer = text[len(layout.closer) :]
            self._close_block(out)
            return True
        if not layout.invoke_open:
            if layout.closer.startswith(text):
                self._buffer = text
                return False
            self._buffer = text
            self._state = _NAME
            return True
        if text.startswith(layout.invoke_open) and not (layout.single_invocation and self._block_calls):
            self._buffer = text[len(layout.invoke_open) :]
            self._state = _NAME
            return True
        if layout.invoke_open.startswith(text) or layout.closer.startswith(text):
            self._buffer = text
            return False
        self._buffer = text
        return self._malformed(out)

    def _malformed(self, out: list[ToolEvent]) -> bool:
        """Text that breaks the syntax inside a block."""
        if not self._block_calls:
            # nothing was reported for this block: its opener was content after all, and the text
            # after it is scanned again as content (it may open the next block)
            opener = self._l.opener if self._raw.startswith(self._l.opener) else ""
            self._state = _CONTENT
            self._buffer = self._raw[len(opener) :]
            out.append(ContentText(opener))
            self._raw = ""
            return True
        # after a reported call: skip to the next delimiter that can continue the block
        resume = [d for d in (self._l.invoke_open, self._l.closer) if d]
        found = find_first(self._buffer, resume)
        if found is None:
            self._buffer = self._buffer[len(self._buffer) - held_suffix(self._buffer, resume) :]
            return False
        self._buffer = self._buffer[found[0] :]
        if self._l.single_invocation and found[1] == self._l.invoke_open:
            self._buffer = self._buffer[len(found[1]) :]  # a later invocation of a one-call block is dropped
        return True

    def _drain_name(self, out: list[ToolEvent]) -> bool:
        layout = self._l
        ends = [layout.invoke_name_close] if layout.invoke_name_close else []
        if not layout.invoke_open:
            ends += [layout.parameter_open, layout.closer]
        found = find_first(self._buffer, ends)
        if found is None:
            # whitespace inside what is surely name text already breaks the name
            candidate = self._buffer[: len(self._buffer) - held_suffix(self._buffer, ends)].strip()
            if len(candidate) > MAX_NAME_CHARS or any(c.isspace() for c in candidate):
                return self._malformed_name(out)
            return False
        index, delimiter = found
        name = self._buffer[:index].strip()
        if not name or len(name) > MAX_NAME_CHARS or any(c.isspace() for c in name):
            return self._malformed_name(out)
        if self._accept_name is not None and not self._accept_name(name):
            return self._malformed_name(out)
        consumed = index + len(delimiter) if delimiter == layout.invoke_name_close else index
        self._buffer = self._buffer[consumed:]
        self._name = name
        self._params = 0
        self._block_calls += 1
        self._call_open = True
        self._raw = ""
        self._state = _PARAMS
        out.append(ToolCallStart(self._calls, name))
        return True

    def _drain_params(self, out: list[ToolEvent]) -> bool:
        text = self._skip_separators()
        layout = self._l
        if not text:
            self._buffer = ""
            return False
        if text.startswith(layout.parameter_open):
            self._buffer = text[len(layout.parameter_open) :]
            self._state = _KEY
            return True
        if layout.invoke_close and text.startswith(layout.invoke_close):
            self._buffer = text[len(layout.invoke_close) :]
            self._end_call(out)
            self._state = _BLOCK
            return True
        if text.startswith(layout.closer):  # also ends an invocation whose invoke_close is missing
            self._buffer = text[len(layout.closer) :]
            self._end_call(out)
            self._close_block(out)
            return True
        delimiters = [d for d in (layout.parameter_open, layout.invoke_close, layout.closer) if d]
        if any(d.startswith(text) for d in delimiters):
            self._buffer = text
            return False
        found = find_first(text, delimiters)
        if found is None:
            self._buffer = text[len(text) - held_suffix(text, delimiters) :]
            return False
        self._buffer = text[found[0] :]  # stray text between parameters is dropped
        return True

    def _drain_key(self, out: list[ToolEvent]) -> bool:
        close = self._l.parameter_name_close
        found = find_first(self._buffer, [close])
        if _too_long(found, self._buffer, close):
            self._state = _PARAMS  # not a parameter name: stray text, dropped up to the next tag
            return True
        if found is None:
            return False
        self._key = self._buffer[: found[0]].strip()
        self._buffer = self._buffer[found[0] + len(found[1]) :]
        self._flag = None
        self._state = _FLAG if self._l.flag_open else _PREVALUE
        return True

    def _drain_flag(self, out: list[ToolEvent]) -> bool:
        layout = self._l
        if self._buffer.startswith(layout.flag_open):
            found = find_first(self._buffer[len(layout.flag_open) :], [layout.flag_close])
            if _too_long(found, self._buffer[len(layout.flag_open) :], layout.flag_close):
                self._state = _PARAMS  # not a flag: the parameter is dropped up to the next tag
                return True
            if found is None:
                return False
            start = len(layout.flag_open)
            self._flag = self._buffer[start : start + found[0]].strip()
            self._buffer = self._buffer[start + found[0] + len(found[1]) :]
            self._begin_flagged_value(out)
            return True
        if layout.flag_open.startswith(self._buffer):
            return False
        self._state = _PREVALUE  # no flag: typed by the schema
        return True

    def _drain_prevalue(self, out: list[ToolEvent]) -> bool:
        if not self._l.value_open:
            self._begin_flagged_value(out)
            return True
        text = self._skip_separators()
        if text.startswith(self._l.value_open):
            self._buffer = text[len(self._l.value_open) :]
            self._begin_flagged_value(out)
            return True
        if not text or self._l.value_open.startswith(text):
            self._buffer = text
            return False
        self._buffer = text  # an untagged value: read as if tagged
        self._begin_flagged_value(out)
        return True

    def _drain_value(self, out: list[ToolEvent]) -> bool:
        if self._value_lead and self._buffer:
            self._value_lead = False
            if self._buffer.startswith("\n"):
                self._buffer = self._buffer[1:]
        found = find_first(self._buffer, self._value_ends)
        if found is not None:
            index, delimiter = found
            self._end_value(self._buffer[:index], out)
            # the value's own close tag is consumed; a tag that implies it is read next
            consumed = index + len(delimiter) if delimiter == self._l.value_close else index
            self._buffer = self._buffer[consumed:]
            return True
        # no end yet: release the value's text but a held suffix that may begin an end
        keep = held_suffix(self._buffer, self._value_ends)
        release = self._buffer[: len(self._buffer) - keep]
        if self._l.wrapping_newlines and release.endswith("\n"):
            release = release[:-1]  # may be the wrapping newline before the close tag
        self._buffer = self._buffer[len(release) :]
        if self._value_is_string:
            if release:
                out.append(ToolCallArguments(self._calls, json_string_fragment(release)))
        else:
            self._value += release
        return False

    # -- blocks, content and values --------------------------------------------------------------

    def _open_block(self, opener: str) -> None:
        self._state = _BLOCK
        self._raw = opener
        self._block_calls = 0
        self._after_call = False

    def _close_block(self, out: list[ToolEvent]) -> None:
        self._state = _CONTENT
        if self._block_calls:
            self._after_call = True
        else:
            out.append(ContentText(self._raw[: len(self._raw) - len(self._buffer)]))
        self._raw = ""

    def _flush_content(self, out: list[ToolEvent], *, final: bool) -> None:
        keep = 0 if final or not self._opener_text_mode else held_suffix(self._buffer, [self._l.opener])
        release = self._buffer[: len(self._buffer) - keep]
        rest = self._buffer[len(release) :]
        if self._after_call:
            if not release.strip():
                if final:
                    self._buffer = rest
                return  # whitespace after a call is held: dropped unless text follows
            release = release.lstrip()
            self._after_call = False
        if release:
            out.append(ContentText(release))
        self._buffer = rest

    def _skip_separators(self) -> str:
        text = self._buffer
        while True:
            stripped = text.lstrip()
            if self._l.separator and stripped.startswith(self._l.separator):
                stripped = stripped[len(self._l.separator) :]
            if stripped == text:
                return text
            text = stripped

    def _malformed_name(self, out: list[ToolEvent]) -> bool:
        self._state = _BLOCK
        return self._malformed(out)

    def _begin_flagged_value(self, out: list[ToolEvent]) -> None:
        if self._flag is not None:
            is_string = self._flag == self._l.string_flag
        else:
            is_string = streams_as_string(self._schemas.get(self._name, {}).get(self._key))
        self._value_is_string = is_string
        self._value = ""
        self._value_lead = self._l.wrapping_newlines
        self._state = _VALUE
        if is_string:
            out.append(ToolCallArguments(self._calls, self._key_prefix() + '"'))

    def _end_value(self, text: str, out: list[ToolEvent]) -> None:
        if self._value_lead and text.startswith("\n"):
            text = text[1:]
        self._value_lead = False
        if self._l.wrapping_newlines and text.endswith("\n"):
            text = text[:-1]
        if self._value_is_string:
            out.append(ToolCallArguments(self._calls, json_string_fragment(text) + '"'))
        else:
            value = self._typed(self._value + text)
            out.append(
                ToolCallArguments(self._calls, self._key_prefix() + json.dumps(value, ensure_ascii=False))
            )
        self._params += 1
        self._value = ""
        self._state = _PARAMS

    def _typed(self, text: str) -> Any:
        if self._flag is not None:  # flagged JSON: text that is not JSON stays a string
            try:
                return json.loads(text)
            except ValueError:
                return text
        return convert_parameter(text, self._schemas.get(self._name, {}).get(self._key))

    def _key_prefix(self) -> str:
        return ("{" if self._params == 0 else ", ") + json.dumps(self._key, ensure_ascii=False) + ": "

    def _end_call(self, out: list[ToolEvent]) -> None:
        out.append(ToolCallArguments(self._calls, "}" if self._params else "{}"))
        self._calls += 1
        self._params = 0
        self._name = ""
        self._call_open = False
