"""Tool-call parsers (host side): split answer text into content and tool calls, incrementally.

Owns: `QwenCoderToolParser` (TOOL_PARSER_QWEN_CODER, function tags), `NoToolParser`, the events
they return (`ContentText`, `ToolCallStart`, `ToolCallArguments`), `convert_parameter` (a value
converted by the tool's JSON schema type) and `BlockParserBase` (content, values and arguments JSON,
shared with the tag engine of `helios.frontend.syntaxes.tagged`).

The function-tag syntax (TOOL_PARSER_QWEN_CODER), every string taken from `ToolSyntax`:

    <tool_call>                 opener   (a marker piece when the tokenizer encodes it as one token)
    <function=NAME>             invoke_open NAME invoke_name_close
    <parameter=KEY>             parameter_open KEY parameter_name_close
    VALUE                       wrapped in one newline on each side when wrapping_newlines
    </parameter>                parameter_close
    </function>                 invoke_close
    </tool_call>                closer

Streaming: a call's start (index, name) is reported once, as soon as its name is complete; its
arguments follow as fragments whose concatenation is the final JSON object. String parameters
stream as they arrive; other types are converted when their value is complete. Whitespace between
and after calls is dropped; a block that never names a function is returned as content.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

from helios.frontend.detokenize import Piece
from helios.frontend.scan import find_first, held_suffix, json_string_fragment
from helios.proto import contract_pb2

MAX_NAME_CHARS = 256


@dataclass(frozen=True, slots=True)
class ContentText:
    text: str


@dataclass(frozen=True, slots=True)
class ToolCallStart:
    index: int  # position of the call in the response, from 0
    name: str


@dataclass(frozen=True, slots=True)
class ToolCallArguments:
    index: int
    fragment: str  # the next characters of the call's arguments JSON


ToolEvent = ContentText | ToolCallStart | ToolCallArguments


class NoToolParser:
    """No tool parsing (TOOL_PARSER_NONE, or a request without tools): all answer is content."""

    def feed(self, piece: Piece) -> list[ToolEvent]:
        return [ContentText(piece.text)] if piece.text else []

    def finish(self) -> list[ToolEvent]:
        return []

    @property
    def calls(self) -> int:
        return 0


def parameter_schemas(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """Function name -> its parameters' `properties` schema, from OpenAI-shaped tools."""
    schemas: dict[str, dict[str, Any]] = {}
    for tool in tools or ():
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        schemas[function["name"]] = dict(properties) if isinstance(properties, Mapping) else {}
    return schemas


def _schema_types(schema: Mapping[str, Any] | None) -> list[str]:
    if not isinstance(schema, Mapping):
        return []
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return [t for t in declared if isinstance(t, str)]
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            return [t for option in options for t in _schema_types(option)]
    if "enum" in schema and all(isinstance(v, str) for v in schema["enum"]):
        return ["string"]
    if "properties" in schema:
        return ["object"]
    return []


def streams_as_string(schema: Mapping[str, Any] | None) -> bool:
    """Whether a parameter's value is a JSON string whatever its text (so it can stream)."""
    types = _schema_types(schema)
    return not types or types == ["string"]


def convert_parameter(value: str, schema: Mapping[str, Any] | None) -> Any:
    """A parameter's text converted by its schema type; text that does not parse stays a string."""
    types = _schema_types(schema)
    if not types or types == ["string"]:
        return value
    text = value.strip()
    for kind in [t for t in types if t != "string"] + (["string"] if "string" in types else []):
        if kind == "null" and text == "null":
            return None
        if kind == "boolean" and text.lower() in ("true", "false"):
            return text.lower() == "true"
        if kind == "integer":
            try:
                return int(text)
            except ValueError:
                try:
                    number = float(text)
                except ValueError:
                    continue
                if number.is_integer():
                    return int(number)
        if kind == "number":
            try:
                return int(text)
            except ValueError:
                try:
                    number = float(text)
                except ValueError:
                    continue
                if math.isfinite(number):
                    return number
        if kind in ("object", "array"):
            try:
                parsed = json.loads(text)
            except ValueError:
                continue
            if isinstance(parsed, dict if kind == "object" else list):
                return parsed
        if kind == "string":
            return value
    return value


_CONTENT, _BLOCK, _NAME, _PARAMS, _KEY, _VALUE = "content", "block", "name", "params", "key", "value"


class BlockParserBase:
    """What the function-tag parser and the tag engine (`helios.frontend.syntaxes.tagged`) share:
    content around blocks (the opener found in text or as a marker piece, whitespace after a call
    dropped), separators, the start and end of a value's text, and the JSON of a call's arguments.
    A subclass sets `_drain` (its state machine), `_typed` (a complete non-string value) and, in
    `_malformed`, what text that breaks the syntax inside a block does."""

    def __init__(
        self,
        *,
        opener: str,
        separator: str,
        wrapping_newlines: bool,
        tools: Sequence[Mapping[str, Any]] | None,
        token_only: Set[str],
        first_index: int = 0,
    ) -> None:
        self._opener = opener
        self._separator = separator
        self._wrapping_newlines = wrapping_newlines
        self._opener_text_mode = opener not in token_only
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
        self._value = ""  # a non-string value's text so far
        self._value_is_string = True
        self._value_lead = False

    @property
    def calls(self) -> int:
        """Index of the next call (calls started so far plus `first_index`)."""
        return self._calls

    def feed(self, piece: Piece) -> list[ToolEvent]:
        out: list[ToolEvent] = []
        if (
            piece.marker
            and self._state == _CONTENT
            and piece.text == self._opener
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

    def _drain(self, out: list[ToolEvent]) -> None:
        raise NotImplementedError

    def _malformed(self, out: list[ToolEvent]) -> bool:
        raise NotImplementedError

    def _typed(self, text: str) -> Any:
        raise NotImplementedError

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

    def _drain_content(self, out: list[ToolEvent]) -> bool:
        if self._opener_text_mode:
            found = find_first(self._buffer, [self._opener])
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

    def _flush_content(self, out: list[ToolEvent], *, final: bool) -> None:
        keep = 0 if final or not self._opener_text_mode else held_suffix(self._buffer, [self._opener])
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
            if self._separator and stripped.startswith(self._separator):
                stripped = stripped[len(self._separator) :]
            if stripped == text:
                return text
            text = stripped

    def _malformed_name(self, out: list[ToolEvent]) -> bool:
        self._state = _BLOCK
        return self._malformed(out)

    def _begin_value(self, out: list[ToolEvent], *, is_string: bool) -> None:
        self._value_is_string = is_string
        self._value = ""
        self._value_lead = self._wrapping_newlines
        self._state = _VALUE
        if is_string:
            out.append(ToolCallArguments(self._calls, self._key_prefix() + '"'))

    def _strip_value_lead(self) -> None:
        if self._value_lead and self._buffer:
            self._value_lead = False
            if self._buffer.startswith("\n"):
                self._buffer = self._buffer[1:]

    def _stream_value(self, ends: list[str], out: list[ToolEvent]) -> None:
        """No end of the value yet: release its text but a held suffix that may begin an end."""
        keep = held_suffix(self._buffer, ends)
        release = self._buffer[: len(self._buffer) - keep]
        if self._wrapping_newlines and release.endswith("\n"):
            release = release[:-1]  # may be the wrapping newline before the close tag
        self._buffer = self._buffer[len(release) :]
        if self._value_is_string:
            if release:
                out.append(ToolCallArguments(self._calls, json_string_fragment(release)))
        else:
            self._value += release

    def _end_value(self, text: str, out: list[ToolEvent]) -> None:
        if self._value_lead and text.startswith("\n"):
            text = text[1:]
        self._value_lead = False
        if self._wrapping_newlines and text.endswith("\n"):
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

    def _key_prefix(self) -> str:
        return ("{" if self._params == 0 else ", ") + json.dumps(self._key, ensure_ascii=False) + ": "

    def _end_call(self, out: list[ToolEvent]) -> None:
        out.append(ToolCallArguments(self._calls, "}" if self._params else "{}"))
        self._calls += 1
        self._params = 0
        self._name = ""
        self._call_open = False


class QwenCoderToolParser(BlockParserBase):
    """TOOL_PARSER_QWEN_CODER over one response's answer pieces."""

    def __init__(
        self,
        syntax: contract_pb2.ToolSyntax,
        *,
        tools: Sequence[Mapping[str, Any]] | None = None,
        token_only: Set[str] = frozenset(),
    ) -> None:
        super().__init__(
            opener=syntax.opener,
            separator=syntax.separator,
            wrapping_newlines=syntax.wrapping_newlines,
            tools=tools,
            token_only=token_only,
        )
        self._s = syntax

    # -- public ----------------------------------------------------------------------------------

    def finish(self) -> list[ToolEvent]:
        out: list[ToolEvent] = []
        if self._state == _CONTENT:
            self._flush_content(out, final=True)
        elif self._state in (_BLOCK, _NAME):
            if not self._block_calls:
                out.append(ContentText(self._raw))
        else:
            if self._state == _VALUE:
                self._end_value(self._buffer, out)
            self._end_call(out)
        self._buffer = ""
        self._state = _CONTENT
        return [event for event in out if not isinstance(event, ContentText) or event.text]

    # -- states ----------------------------------------------------------------------------------

    def _drain(self, out: list[ToolEvent]) -> None:
        step = {
            _CONTENT: self._drain_content,
            _BLOCK: self._drain_block,
            _NAME: self._drain_name,
            _PARAMS: self._drain_params,
            _KEY: self._drain_key,
            _VALUE: self._drain_value,
        }
        while step[self._state](out):
            pass

    def _drain_block(self, out: list[ToolEvent]) -> bool:
        text = self._skip_separators()
        if not text:
            self._buffer = ""
            return False
        s = self._s
        if text.startswith(s.invoke_open):
            self._buffer = text[len(s.invoke_open) :]
            self._state = _NAME
            return True
        if text.startswith(s.closer):
            self._buffer = text[len(s.closer) :]
            self._close_block(out)
            return True
        if s.invoke_open.startswith(text) or s.closer.startswith(text):
            self._buffer = text
            return False
        return self._malformed(out)

    def _malformed(self, out: list[ToolEvent]) -> bool:
        """Text that breaks the syntax inside a block."""
        if not self._block_calls:
            # nothing was reported for this block: it was content after all
            self._state = _CONTENT
            self._buffer = ""
            out.append(ContentText(self._raw))
            self._raw = ""
            return False
        # after a reported call: skip to the next delimiter that can continue the block
        found = find_first(self._buffer, [self._s.invoke_open, self._s.closer])
        if found is None:
            self._buffer = self._buffer[
                len(self._buffer) - held_suffix(self._buffer, [self._s.invoke_open, self._s.closer]) :
            ]
            return False
        self._buffer = self._buffer[found[0] :]
        return True

    def _drain_name(self, out: list[ToolEvent]) -> bool:
        found = find_first(self._buffer, [self._s.invoke_name_close])
        if found is None:
            if len(self._buffer) > MAX_NAME_CHARS or "\n" in self._buffer:
                return self._malformed_name(out)
            return False
        name = self._buffer[: found[0]].strip()
        if not name or len(name) > MAX_NAME_CHARS or any(c.isspace() for c in name):
            return self._malformed_name(out)
        self._buffer = self._buffer[found[0] + len(found[1]) :]
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
        s = self._s
        if not text:
            self._buffer = ""
            return False
        if text.startswith(s.parameter_open):
            self._buffer = text[len(s.parameter_open) :]
            self._state = _KEY
            return True
        for ender in (s.invoke_close, s.closer):
            if text.startswith(ender):
                # a missing invoke_close is implied by the block closer
                self._buffer = text[len(ender) :] if ender == s.invoke_close else text
                self._end_call(out)
                self._state = _BLOCK
                return True
        if any(d.startswith(text) for d in (s.parameter_open, s.invoke_close, s.closer)):
            self._buffer = text
            return False
        found = find_first(text, [s.parameter_open, s.invoke_close, s.closer])
        if found is None:
            self._buffer = text[len(text) - held_suffix(text, [s.parameter_open, s.invoke_close, s.closer]) :]
            return False
        self._buffer = text[found[0] :]  # stray text between parameters is dropped
        return True

    def _drain_key(self, out: list[ToolEvent]) -> bool:
        found = find_first(self._buffer, [self._s.parameter_name_close])
        if found is None:
            return False
        self._key = self._buffer[: found[0]].strip()
        self._buffer = self._buffer[found[0] + len(found[1]) :]
        self._begin_value(out, is_string=streams_as_string(self._schemas.get(self._name, {}).get(self._key)))
        return True

    def _drain_value(self, out: list[ToolEvent]) -> bool:
        self._strip_value_lead()
        s = self._s
        ends = [s.parameter_close, s.parameter_open, s.invoke_close, s.closer]
        found = find_first(self._buffer, ends)
        if found is not None:
            index, delimiter = found
            self._end_value(self._buffer[:index], out)
            consumed = index + len(delimiter) if delimiter == s.parameter_close else index
            self._buffer = self._buffer[consumed:]
            return True
        self._stream_value(ends, out)
        return False

    def _typed(self, text: str) -> Any:
        return convert_parameter(text, self._schemas.get(self._name, {}).get(self._key))
