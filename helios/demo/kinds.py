"""The demo's task vocabulary (host side): task kinds, the split a prompt is phrased for, what a
correct reply contains, and the kind-specific part of an example that the task makers return.

The makers (`arithmetic`, `conversation`, `tool_tasks`) build a `Task`; `helios.demo.tasks` adds
the system prompt, offered tools and history and turns it into an `Example`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from helios.errors import HeliosError


class InvalidExpectation(HeliosError):
    """An expectation does not carry exactly the fields its task kind is scored by."""


class TaskKind(StrEnum):
    ADDITION = "addition"
    SUBTRACTION = "subtraction"
    MULTIPLICATION = "multiplication"
    DIVISION = "division"
    UNIT_CONVERSION = "unit_conversion"
    COPY = "copy"
    REVERSE = "reverse"
    JSON_EXTRACTION = "json_extraction"
    TOOL_CALL = "tool_call"
    TOOL_ANSWER = "tool_answer"
    NO_TOOL = "no_tool"
    SMALL_TALK = "small_talk"
    IDENTITY = "identity"
    OUT_OF_DOMAIN = "out_of_domain"
    MULTI_TURN = "multi_turn"


class Split(StrEnum):
    """Which phrasing pool a prompt is drawn from. Held-out phrasings, tool names, parameter names
    and descriptions are written apart from the training ones and never appear in training."""

    TRAIN = "train"
    HELD_OUT = "held_out"


# The acceptance groups of issue #17 and their bars (fraction correct on the held-out prompts).
TASK_GROUPS: dict[str, tuple[TaskKind, ...]] = {
    "arithmetic": (TaskKind.ADDITION, TaskKind.SUBTRACTION, TaskKind.MULTIPLICATION, TaskKind.DIVISION,
                   TaskKind.UNIT_CONVERSION),
    "tool_calls": (TaskKind.TOOL_CALL,),
    "rest": (TaskKind.COPY, TaskKind.REVERSE, TaskKind.JSON_EXTRACTION, TaskKind.TOOL_ANSWER, TaskKind.NO_TOOL,
             TaskKind.SMALL_TALK, TaskKind.IDENTITY, TaskKind.OUT_OF_DOMAIN, TaskKind.MULTI_TURN),
}
GROUP_BARS: dict[str, float] = {"arithmetic": 0.95, "tool_calls": 0.95, "rest": 0.90}

# Kinds answered in words: the answer must be printable prose holding the expected phrases.
WORDED_KINDS: frozenset[TaskKind] = frozenset(
    {TaskKind.TOOL_ANSWER, TaskKind.NO_TOOL, TaskKind.SMALL_TALK, TaskKind.IDENTITY, TaskKind.OUT_OF_DOMAIN})

_REQUIRED: dict[TaskKind, tuple[frozenset[str], ...]] = {
    TaskKind.ADDITION: (frozenset({"number"}),),
    TaskKind.SUBTRACTION: (frozenset({"number"}),),
    TaskKind.MULTIPLICATION: (frozenset({"number"}),),
    TaskKind.DIVISION: (frozenset({"number"}),),
    TaskKind.UNIT_CONVERSION: (frozenset({"number"}),),
    TaskKind.COPY: (frozenset({"text"}),),
    TaskKind.REVERSE: (frozenset({"text"}),),
    TaskKind.JSON_EXTRACTION: (frozenset({"json_text"}),),
    TaskKind.TOOL_CALL: (frozenset({"tool_name", "tool_arguments"}),),
    TaskKind.TOOL_ANSWER: (frozenset({"facts"}),),
    TaskKind.NO_TOOL: (frozenset({"facts"}),),
    TaskKind.SMALL_TALK: (frozenset({"facts"}),),
    TaskKind.IDENTITY: (frozenset({"facts"}),),
    TaskKind.OUT_OF_DOMAIN: (frozenset({"facts"}),),
    # a follow-up question: a number (arithmetic on an earlier answer) or facts (a recalled detail)
    TaskKind.MULTI_TURN: (frozenset({"number"}), frozenset({"facts"})),
}


@dataclass(frozen=True, slots=True)
class Expectation:
    """What a correct reply contains; exactly the fields of its kind are set."""

    kind: TaskKind
    number: int | None = None  # arithmetic: the last number of the answer
    text: str | None = None  # copy, reverse: the whole answer, exactly
    json_text: str | None = None  # JSON extraction: the object the answer must parse to
    tool_name: str | None = None  # tool call: the function to call
    tool_arguments: tuple[tuple[str, str], ...] = ()  # tool call: (name, value as the template renders it)
    facts: tuple[str, ...] = ()  # worded answers: substrings the answer must contain

    def __post_init__(self) -> None:
        present = {
            "number": self.number is not None,
            "text": self.text is not None,
            "json_text": self.json_text is not None,
            "tool_name": self.tool_name is not None,
            "tool_arguments": bool(self.tool_arguments),
            "facts": bool(self.facts),
        }
        have = frozenset(name for name, set_ in present.items() if set_)
        allowed = _REQUIRED[self.kind]
        if have not in allowed:
            raise InvalidExpectation(
                f"a {self.kind} expectation needs exactly {' or '.join(str(sorted(a)) for a in allowed)}, "
                f"got {sorted(have)}"
            )
        if self.json_text is not None and not isinstance(json.loads(self.json_text), dict):
            raise InvalidExpectation(f"json_text must encode an object, got {self.json_text!r}")


@dataclass(frozen=True, slots=True)
class Task:
    """The kind-specific part of an example, before system prompt, tools and history are added."""

    question: str  # the final user question
    reasoning: str  # the think block of the reply
    content: str | None  # the reply's visible answer (None for a bare tool call)
    expectation: Expectation
    tool_calls: tuple[dict[str, Any], ...] = ()  # the reply's tool calls
    # messages between the question and the reply (a tool call and its result)
    followup: tuple[dict[str, Any], ...] = ()
    # messages before the question (an earlier exchange the question refers to)
    history: tuple[dict[str, Any], ...] = ()
    tools: tuple[dict[str, Any], ...] | None = None  # the tools to offer; None: the builder decides
