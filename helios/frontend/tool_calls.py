"""Tool-call events and values (host side), shared by every tool parser.

Owns: the events a tool parser returns (`ContentText`, `ToolCallStart`, `ToolCallArguments`),
`NoToolParser` (TOOL_PARSER_NONE, or a request without tools), `parameter_schemas` (a request's tools
as function name -> parameter schemas), `streams_as_string` and `convert_parameter` (a value typed by
its JSON schema) and `MAX_NAME_CHARS`. The tag-syntax parsers themselves are layouts of the shared
tag engine, `helios.frontend.syntaxes.tagged`.

Streaming: a call's start (index, name) is reported once, as soon as its name is complete; its
arguments follow as fragments whose concatenation is the final JSON object.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from helios.frontend.detokenize import Piece

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


def _number(text: str) -> int | float | None:
    """The text as an int where it spells one, else as a float, else None."""
    try:
        return int(text)
    except ValueError:
        try:
            return float(text)
        except ValueError:
            return None


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
        if kind in ("integer", "number") and (number := _number(text)) is not None:
            if isinstance(number, int):
                return number
            if kind == "integer" and number.is_integer():
                return int(number)
            if kind == "number" and math.isfinite(number):
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
