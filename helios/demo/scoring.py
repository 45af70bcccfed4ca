"""Scoring of demo answers (host side): is a generated reply correct for its task?

Independent of how the text was produced (HF greedy decoding now, `helios generate` or the server
later): `score_text` takes the raw generated assistant text, markup included, and `score_reply`
takes an already parsed reply (content and tool calls, as a server returns them). Both return a
`Verdict` with a reason; `summarize` turns verdicts into per-kind and per-group accuracy.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from helios.demo.kinds import TASK_GROUPS, WORDED_KINDS, Expectation, TaskKind
from helios.errors import HeliosError


class MalformedToolCall(HeliosError):
    """A `<tool_call>` block does not follow the Qwen Coder function-tag syntax."""


class InvalidAccuracy(HeliosError):
    """An accuracy tally counts more correct answers than answers, or a negative number."""


THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
END_MARKERS = ("<|im_end|>", "<|endoftext|>")

_FUNCTION = re.compile(r"\A\n<function=([^>\n]+)>\n(.*)</function>\n\Z", re.DOTALL)
_PARAMETER = re.compile(r"<parameter=([^>\n]+)>\n(.*?)\n</parameter>\n", re.DOTALL)
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One parsed call: the function name and its arguments as the text spelled them."""

    name: str
    arguments: tuple[tuple[str, str], ...]  # (parameter name, raw value), in order

    def __post_init__(self) -> None:
        if not self.name:
            raise MalformedToolCall("a tool call needs a function name")


@dataclass(frozen=True, slots=True)
class ParsedReply:
    """An assistant reply split into reasoning, visible content and tool calls."""

    reasoning: str | None  # None when the reply has no think block
    content: str  # the answer text outside reasoning and tool calls, stripped
    tool_calls: tuple[ToolCall, ...]
    malformed: str | None = None  # why the markup could not be parsed, if it could not


@dataclass(frozen=True, slots=True)
class Verdict:
    """The score of one reply: correct or not, and why not."""

    kind: TaskKind
    correct: bool
    reason: str  # "ok" when correct, otherwise what was wrong


def _parse_tool_call(block: str) -> ToolCall:
    match = _FUNCTION.match(block)
    if match is None:
        raise MalformedToolCall(f"expected '<function=NAME>' ... '</function>' inside the call, got {block!r}")
    name, body = match.group(1), match.group(2)
    arguments = []
    position = 0
    for parameter in _PARAMETER.finditer(body):
        if parameter.start() != position:
            raise MalformedToolCall(f"unexpected text {body[position:parameter.start()]!r} in call {name}")
        arguments.append((parameter.group(1), parameter.group(2)))
        position = parameter.end()
    if position != len(body):
        raise MalformedToolCall(f"unexpected text {body[position:]!r} at the end of call {name}")
    return ToolCall(name, tuple(arguments))


def parse_reply(text: str) -> ParsedReply:
    """Split raw generated text (`<think>` reasoning, content, `<tool_call>` blocks, end marker)."""
    for marker in END_MARKERS:
        if marker in text:
            text = text[: text.index(marker)]
    reasoning = None
    if text.lstrip().startswith(THINK_OPEN):
        text = text.lstrip()[len(THINK_OPEN) :]
        if THINK_CLOSE not in text:
            return ParsedReply(text.strip(), "", (), malformed="the reasoning never closes")
        reasoning, text = text.split(THINK_CLOSE, 1)
        reasoning = reasoning.strip()
    if CALL_OPEN not in text:
        return ParsedReply(reasoning, text.strip(), ())
    content, rest = text.split(CALL_OPEN, 1)
    calls = []
    for index, chunk in enumerate(rest.split(CALL_OPEN)):
        if CALL_CLOSE not in chunk:
            return ParsedReply(reasoning, content.strip(), tuple(calls), malformed=f"tool call {index} never closes")
        block, after = chunk.split(CALL_CLOSE, 1)
        if after.strip():
            return ParsedReply(reasoning, content.strip(), tuple(calls),
                               malformed=f"text {after.strip()!r} follows tool call {index}")
        try:
            calls.append(_parse_tool_call(block))
        except MalformedToolCall as error:
            return ParsedReply(reasoning, content.strip(), tuple(calls), malformed=str(error))
    return ParsedReply(reasoning, content.strip(), tuple(calls))


_NUMBERED_KINDS = frozenset(
    {TaskKind.ADDITION, TaskKind.SUBTRACTION, TaskKind.MULTIPLICATION, TaskKind.DIVISION, TaskKind.UNIT_CONVERSION})


def _same_value(generated: str, expected: str) -> bool:
    """Equal as text, as numbers, as booleans (the template writes True, JSON true) or as JSON arrays."""
    generated, expected = generated.strip(), expected.strip()
    if generated == expected:
        return True
    if {generated.lower(), expected.lower()} <= {"true", "false"}:
        return generated.lower() == expected.lower()
    try:
        return float(generated) == float(expected)
    except ValueError:
        pass
    try:
        return isinstance(json.loads(expected), list) and json.loads(generated) == json.loads(expected)
    except ValueError:
        return False


def _worded(content: str) -> str | None:
    """Why `content` is not a printable answer in words, or None when it is one."""
    if not any(character.isalpha() for character in content):
        return f"answer {content!r} holds no words"
    if not all(character.isprintable() or character == "\n" for character in content):
        return f"answer {content!r} holds unprintable characters"
    if "<" in content and ">" in content:
        return f"answer {content!r} holds markup"
    return None


def _check(expectation: Expectation, content: str, tool_calls: tuple[ToolCall, ...]) -> str:
    """'ok' or the reason the reply is wrong."""
    kind = expectation.kind
    if kind is TaskKind.TOOL_CALL:
        if len(tool_calls) != 1:
            return f"expected one call of {expectation.tool_name}, got {len(tool_calls)} calls"
        call = tool_calls[0]
        if call.name != expectation.tool_name:
            return f"called {call.name}, expected {expectation.tool_name}"
        generated = dict(call.arguments)
        if len(generated) != len(call.arguments):
            return f"call {call.name} repeats a parameter"
        expected = dict(expectation.tool_arguments)
        if set(generated) != set(expected):
            return f"arguments {sorted(generated)}, expected {sorted(expected)}"
        for key, value in expected.items():
            if not _same_value(generated[key], value):
                return f"argument {key}={generated[key]!r}, expected {value!r}"
        return "ok"
    if tool_calls:
        return f"called {tool_calls[0].name} where an answer was expected"
    if kind in _NUMBERED_KINDS or (kind is TaskKind.MULTI_TURN and expectation.number is not None):
        numbers = _NUMBER.findall(content)
        if not numbers:
            return "the answer holds no number"
        return "ok" if _same_value(numbers[-1], str(expectation.number)) else (
            f"final number {numbers[-1]}, expected {expectation.number}")
    if kind in (TaskKind.COPY, TaskKind.REVERSE):
        return "ok" if content == expectation.text else f"answer {content!r}, expected {expectation.text!r}"
    if kind is TaskKind.JSON_EXTRACTION:
        try:
            generated_object = json.loads(content)
        except json.JSONDecodeError as error:
            return f"answer is not JSON ({error.msg})"
        expected_object = json.loads(expectation.json_text or "{}")
        return "ok" if generated_object == expected_object else f"object {generated_object!r}, expected {expected_object!r}"
    if kind in WORDED_KINDS and (problem := _worded(content)) is not None:
        return problem
    missing = [fact for fact in expectation.facts if fact not in content]
    return "ok" if not missing else f"answer {content!r} misses {missing}"


def score_text(expectation: Expectation, text: str) -> Verdict:
    """Score raw generated assistant text (reasoning and tool-call markup included)."""
    parsed = parse_reply(text)
    if parsed.malformed is not None:
        return Verdict(expectation.kind, False, f"malformed reply: {parsed.malformed}")
    reason = _check(expectation, parsed.content, parsed.tool_calls)
    return Verdict(expectation.kind, reason == "ok", reason)


def _argument_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value)


def score_reply(
    expectation: Expectation, content: str | None, tool_calls: Iterable[Mapping[str, Any]] = ()
) -> Verdict:
    """Score an already parsed reply: visible content and OpenAI-style tool calls, whose
    `function.arguments` is a JSON object or its JSON string."""
    calls = []
    for call in tool_calls:
        function = call.get("function", call)
        arguments = function.get("arguments") or {}
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                return Verdict(expectation.kind, False, f"arguments of {function.get('name')} are not JSON")
        if not isinstance(arguments, Mapping):
            return Verdict(expectation.kind, False, f"arguments of {function.get('name')} are not an object")
        try:
            calls.append(ToolCall(str(function.get("name") or ""),
                                  tuple((str(k), _argument_text(v)) for k, v in arguments.items())))
        except MalformedToolCall as error:
            return Verdict(expectation.kind, False, str(error))
    reason = _check(expectation, (content or "").strip(), tuple(calls))
    return Verdict(expectation.kind, reason == "ok", reason)


@dataclass(frozen=True, slots=True)
class Accuracy:
    """How many of `total` replies were correct."""

    correct: int
    total: int

    def __post_init__(self) -> None:
        if not (0 <= self.correct <= self.total):
            raise InvalidAccuracy(f"correct must be within 0..total, got {self.correct}/{self.total}")

    @property
    def fraction(self) -> float:
        return self.correct / self.total if self.total else 0.0


def summarize(verdicts: Iterable[Verdict]) -> dict[str, Accuracy]:
    """Accuracy per task kind, per acceptance group (`group:NAME`) and overall (`all`)."""
    verdicts = list(verdicts)
    report: dict[str, Accuracy] = {}

    def tally(selected: list[Verdict]) -> Accuracy:
        return Accuracy(sum(verdict.correct for verdict in selected), len(selected))

    for kind in TaskKind:
        selected = [verdict for verdict in verdicts if verdict.kind is kind]
        if selected:
            report[str(kind)] = tally(selected)
    for group, kinds in TASK_GROUPS.items():
        selected = [verdict for verdict in verdicts if verdict.kind in kinds]
        if selected:
            report[f"group:{group}"] = tally(selected)
    report["all"] = tally(verdicts)
    return report
