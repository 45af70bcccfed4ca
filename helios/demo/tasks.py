"""The demo's synthetic tasks (host side): deterministic examples with their expected answers.

`make_example(seed, index)` draws one training `Example` from its own random stream, so any example
of any seed can be produced alone, in any order, by any worker; `held_out_examples(seed, count)`
draws evaluation examples from the held-out phrasing pools, tool names and wordings (written apart
from the training ones), each kind in turn. An example is an OpenAI-style conversation (`messages`,
optional `tools`), the assistant `reply` the model should produce (reasoning, content, tool calls),
and an `Expectation` that `helios.demo.scoring` checks generated text against.

The makers live by topic: `arithmetic`, `records` (copy, reverse, JSON), `tool_tasks`, `conversation`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from helios.demo import arithmetic, conversation, records, tool_tasks
from helios.demo.kinds import (
    GROUP_BARS,
    TASK_GROUPS,
    WORDED_KINDS,
    Expectation,
    InvalidExpectation,
    Split,
    Task,
    TaskKind,
)

# Training mixture: tool use needs the most examples (a large schema space), then arithmetic. The
# kinds a held-out run found weakest (copy, reverse, JSON, small talk, identity, out-of-domain,
# multi-turn) get more than before: their composed phrasing pools are far larger than they were.
# Tool calls, furthest below their bar, take a share of addition and multiplication.
TRAINING_WEIGHTS: dict[TaskKind, float] = {
    TaskKind.ADDITION: 0.05,
    TaskKind.SUBTRACTION: 0.06,
    TaskKind.MULTIPLICATION: 0.05,
    TaskKind.DIVISION: 0.06,
    TaskKind.UNIT_CONVERSION: 0.06,
    TaskKind.COPY: 0.06,
    TaskKind.REVERSE: 0.07,
    TaskKind.JSON_EXTRACTION: 0.07,
    TaskKind.TOOL_CALL: 0.17,
    TaskKind.TOOL_ANSWER: 0.08,
    TaskKind.NO_TOOL: 0.05,
    TaskKind.SMALL_TALK: 0.05,
    TaskKind.IDENTITY: 0.05,
    TaskKind.OUT_OF_DOMAIN: 0.05,
    TaskKind.MULTI_TURN: 0.07,
}

SYSTEM_PROMPTS: tuple[str, ...] = (
    "You are a helpful assistant.",
    "You are Helios, a small demo model. Answer briefly.",
    "Be concise.",
    "You are a friendly assistant.",
)

MAKERS: dict[TaskKind, Callable[[random.Random, Split], Task]] = {
    TaskKind.ADDITION: arithmetic.addition,
    TaskKind.SUBTRACTION: arithmetic.subtraction,
    TaskKind.MULTIPLICATION: arithmetic.multiplication,
    TaskKind.DIVISION: arithmetic.division,
    TaskKind.UNIT_CONVERSION: arithmetic.unit_conversion,
    TaskKind.COPY: records.copy,
    TaskKind.REVERSE: records.reverse,
    TaskKind.JSON_EXTRACTION: records.json_extraction,
    TaskKind.TOOL_CALL: tool_tasks.tool_call,
    TaskKind.TOOL_ANSWER: tool_tasks.tool_answer,
    TaskKind.NO_TOOL: tool_tasks.no_tool,
    TaskKind.SMALL_TALK: conversation.small_talk,
    TaskKind.IDENTITY: conversation.identity,
    TaskKind.OUT_OF_DOMAIN: conversation.out_of_domain,
    TaskKind.MULTI_TURN: conversation.multi_turn,
}


@dataclass(frozen=True, slots=True)
class Example:
    """One conversation to answer, the reply to learn, and how to score a generated reply."""

    kind: TaskKind
    question: str  # the final user question (held-out questions are kept out of training)
    messages: tuple[dict[str, Any], ...]  # OpenAI-style messages up to the reply
    tools: tuple[dict[str, Any], ...]  # offered tool schemas, possibly none
    reply: dict[str, Any]  # the assistant message: reasoning_content, content, tool_calls
    expectation: Expectation

    def __post_init__(self) -> None:
        if not self.messages or self.messages[-1]["role"] not in ("user", "tool"):
            raise InvalidExpectation("an example's messages must end with a user or tool message")
        if self.reply.get("role") != "assistant":
            raise InvalidExpectation("an example's reply must be an assistant message")
        if self.expectation.kind != self.kind:
            raise InvalidExpectation(f"example kind {self.kind} has a {self.expectation.kind} expectation")


def _history(rng: random.Random, split: Split) -> tuple[dict[str, Any], ...]:
    """An earlier, already answered exchange (assistant history carries no reasoning)."""
    earlier = MAKERS[rng.choice((TaskKind.ADDITION, TaskKind.COPY, TaskKind.UNIT_CONVERSION))](rng, split)
    return ({"role": "user", "content": earlier.question}, {"role": "assistant", "content": earlier.content})


def build_example(kind: TaskKind, rng: random.Random, split: Split = Split.TRAIN) -> Example:
    """One example of `kind` phrased from `split`, with a random system prompt, offered tools and history."""
    task = MAKERS[kind](rng, split)
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.3:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    if task.tools is not None:
        tools = task.tools
    else:
        tools = tool_tasks.random_tools(rng, split) if rng.random() < 0.2 else ()
    if task.history:
        messages.extend(task.history)
    elif rng.random() < 0.1:
        messages.extend(_history(rng, split))
    messages.append({"role": "user", "content": task.question})
    messages.extend(task.followup)
    reply: dict[str, Any] = {"role": "assistant", "reasoning_content": task.reasoning, "content": task.content}
    if task.tool_calls:
        reply["tool_calls"] = list(task.tool_calls)
    return Example(kind, task.question, tuple(messages), tools, reply, task.expectation)


def example_rng(seed: int, index: int) -> random.Random:
    """The random stream of example `index` of `seed` (independent of every other example)."""
    return random.Random(f"helios-demo:{seed}:{index}")


def make_example(seed: int, index: int, kinds: dict[TaskKind, float] | None = None) -> Example:
    """Training example `index` of `seed`, its kind drawn from `kinds` (default: the training mixture)."""
    weights = kinds or TRAINING_WEIGHTS
    rng = example_rng(seed, index)
    kind = rng.choices(list(weights), weights=list(weights.values()))[0]
    return build_example(kind, rng, Split.TRAIN)


def held_out_examples(seed: int, count: int) -> list[Example]:
    """`count` evaluation examples phrased from the held-out pools, the kinds taken in turn."""
    kinds = list(TaskKind)
    return [build_example(kinds[index % len(kinds)], example_rng(seed, index), Split.HELD_OUT)
            for index in range(count)]


__all__ = [
    "GROUP_BARS", "MAKERS", "SYSTEM_PROMPTS", "TASK_GROUPS", "TRAINING_WEIGHTS", "WORDED_KINDS", "Example",
    "Expectation", "InvalidExpectation", "Split", "TaskKind", "build_example", "example_rng", "held_out_examples",
    "make_example",
]
