"""The demo's synthetic tasks (host side): deterministic examples with their expected answers.

`make_example(seed, index)` draws one `Example` from its own random stream, so any example of any
seed can be produced alone, in any order, by any worker. An example is an OpenAI-style conversation
(`messages`, optional `tools`), the assistant `reply` the model should produce (reasoning, content,
tool calls), and an `Expectation` that `helios.demo.scoring` checks generated text against.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from helios.demo.tools import (
    TOOL_NAMES,
    TOOL_SCHEMAS,
    convert_amount,
    currency_payload,
    time_payload,
    weather_payload,
)
from helios.demo.vocabulary import (
    CITIES,
    CURRENCY_PER_USD,
    LETTERS,
    NAMES,
    UNIT_CONVERSIONS,
    WEATHER_CONDITIONS,
)
from helios.errors import HeliosError


class InvalidExpectation(HeliosError):
    """An expectation does not carry exactly the fields its task kind is scored by."""


class TaskKind(StrEnum):
    ADDITION = "addition"
    SUBTRACTION = "subtraction"
    UNIT_CONVERSION = "unit_conversion"
    COPY = "copy"
    REVERSE = "reverse"
    JSON_EXTRACTION = "json_extraction"
    TOOL_CALL = "tool_call"
    TOOL_ANSWER = "tool_answer"


# The acceptance groups of issue #9: each must reach 95% on the held-out prompts.
TASK_GROUPS: dict[str, tuple[TaskKind, ...]] = {
    "arithmetic": (TaskKind.ADDITION, TaskKind.SUBTRACTION, TaskKind.UNIT_CONVERSION),
    "strings": (TaskKind.COPY, TaskKind.REVERSE),
    "json": (TaskKind.JSON_EXTRACTION,),
    "tool_calls": (TaskKind.TOOL_CALL,),
    "tool_answers": (TaskKind.TOOL_ANSWER,),
}

# Training mixture: the kinds that need exact copying (strings, tool results) get more weight.
TRAINING_WEIGHTS: dict[TaskKind, float] = {
    TaskKind.ADDITION: 0.12,
    TaskKind.SUBTRACTION: 0.12,
    TaskKind.UNIT_CONVERSION: 0.09,
    TaskKind.COPY: 0.12,
    TaskKind.REVERSE: 0.17,
    TaskKind.JSON_EXTRACTION: 0.09,
    TaskKind.TOOL_CALL: 0.14,
    TaskKind.TOOL_ANSWER: 0.15,
}

SYSTEM_PROMPTS: tuple[str, ...] = (
    "You are a helpful assistant.",
    "You are Helios, a small demo model. Answer briefly.",
)


@dataclass(frozen=True, slots=True)
class Expectation:
    """What a correct reply contains; exactly the fields of its kind are set."""

    kind: TaskKind
    number: int | None = None  # arithmetic: the last number of the answer
    text: str | None = None  # copy, reverse: the whole answer, exactly
    json_text: str | None = None  # JSON extraction: the object the answer must parse to
    tool_name: str | None = None  # tool call: the function to call
    tool_arguments: tuple[tuple[str, str], ...] = ()  # tool call: (name, value as rendered)
    facts: tuple[str, ...] = ()  # tool answer: substrings the answer must contain

    def __post_init__(self) -> None:
        present = {
            "number": self.number is not None,
            "text": self.text is not None,
            "json_text": self.json_text is not None,
            "tool_name": self.tool_name is not None,
            "tool_arguments": bool(self.tool_arguments),
            "facts": bool(self.facts),
        }
        required = {
            TaskKind.ADDITION: {"number"},
            TaskKind.SUBTRACTION: {"number"},
            TaskKind.UNIT_CONVERSION: {"number"},
            TaskKind.COPY: {"text"},
            TaskKind.REVERSE: {"text"},
            TaskKind.JSON_EXTRACTION: {"json_text"},
            TaskKind.TOOL_CALL: {"tool_name", "tool_arguments"},
            TaskKind.TOOL_ANSWER: {"facts"},
        }[self.kind]
        have = {name for name, set_ in present.items() if set_}
        if have != required:
            raise InvalidExpectation(
                f"a {self.kind} expectation needs exactly {sorted(required)}, got {sorted(have)}"
            )
        if self.json_text is not None and not isinstance(json.loads(self.json_text), dict):
            raise InvalidExpectation(f"json_text must encode an object, got {self.json_text!r}")


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


@dataclass(frozen=True, slots=True)
class _Task:
    """The kind-specific part of an example, before system prompt, tools and history are added."""

    question: str
    reasoning: str
    content: str | None
    expectation: Expectation
    tool_calls: tuple[dict[str, Any], ...] = ()
    # messages between the question and the reply (the tool call and its result)
    followup: tuple[dict[str, Any], ...] = ()
    tool_name: str | None = None  # the tool the task needs offered, if any


def _operand(rng: random.Random) -> int:
    return rng.randint(10, 99) if rng.random() < 0.7 else rng.randint(0, 99)


def _addition(rng: random.Random) -> _Task:
    a, b = _operand(rng), _operand(rng)
    question = rng.choice(
        ("What is {a} + {b}?", "Compute {a} plus {b}.", "How much is {a} + {b}?", "Add {a} and {b}.",
         "{a} + {b} = ?", "What do you get when you add {a} to {b}?")
    ).format(a=a, b=b)
    ones = a % 10 + b % 10
    carry = ones // 10
    reasoning = (
        f"Ones: {a % 10} + {b % 10} = {ones}, write {ones % 10}, carry {carry}.\n"
        f"Tens: {a // 10} + {b // 10} + {carry} = {a // 10 + b // 10 + carry}."
    )
    return _Task(question, reasoning, f"{a} + {b} = {a + b}", Expectation(TaskKind.ADDITION, number=a + b))


def _subtraction(rng: random.Random) -> _Task:
    a, b = _operand(rng), _operand(rng)
    a, b = max(a, b), min(a, b)
    question = rng.choice(
        ("What is {a} - {b}?", "Compute {a} minus {b}.", "How much is {a} - {b}?", "Subtract {b} from {a}.",
         "{a} - {b} = ?", "Take {b} away from {a}.")
    ).format(a=a, b=b)
    if a % 10 >= b % 10:
        borrow = 0
        ones_line = f"Ones: {a % 10} - {b % 10} = {a % 10 - b % 10}."
    else:
        borrow = 1
        ones_line = f"Ones: {a % 10} - {b % 10} needs a borrow: {a % 10 + 10} - {b % 10} = {a % 10 + 10 - b % 10}."
    reasoning = f"{ones_line}\nTens: {a // 10} - {borrow} - {b // 10} = {a // 10 - borrow - b // 10}."
    return _Task(question, reasoning, f"{a} - {b} = {a - b}", Expectation(TaskKind.SUBTRACTION, number=a - b))


def _unit_conversion(rng: random.Random) -> _Task:
    row = rng.choice(UNIT_CONVERSIONS)
    amount = rng.randint(1, row.max_amount)
    source = row.singular if amount == 1 else row.source
    question = rng.choice(
        ("Convert {n} {s} to {t}.", "How many {t} are in {n} {s}?", "What is {n} {s} in {t}?",
         "Express {n} {s} in {t}.")
    ).format(n=amount, s=source, t=row.target)
    result = amount * row.factor
    reasoning = f"1 {row.singular} is {row.factor} {row.target}, so {amount} × {row.factor} = {result}."
    content = f"{amount} {source} is {result} {row.target}."
    return _Task(question, reasoning, content, Expectation(TaskKind.UNIT_CONVERSION, number=result))


def _random_word(rng: random.Random, shortest: int, longest: int) -> str:
    return "".join(rng.choice(LETTERS) for _ in range(rng.randint(shortest, longest)))


def _copy(rng: random.Random) -> _Task:
    words = 1 if rng.random() < 0.7 else 2
    text = " ".join(_random_word(rng, 3, 8) for _ in range(words))
    question = rng.choice(
        ("Repeat exactly: {s}", "Copy this text: {s}", "Say back exactly: {s}", "Echo the following: {s}")
    ).format(s=text)
    reasoning = "The user wants the text repeated exactly."
    return _Task(question, reasoning, text, Expectation(TaskKind.COPY, text=text))


def _reverse(rng: random.Random) -> _Task:
    word = _random_word(rng, 3, 7)
    question = rng.choice(
        ("Reverse the string: {s}", "Write {s} backwards.", "Spell {s} in reverse.",
         "Reverse the letters of {s}.")
    ).format(s=word)
    backwards = word[::-1]
    # Numbered letters make the reversal a count-down plus lookups, robust to repeated letters.
    forward = " ".join(f"{position} {letter}" for position, letter in enumerate(word, start=1))
    reverse = " ".join(f"{len(word) - offset} {letter}" for offset, letter in enumerate(backwards))
    reasoning = f"{forward}\nBackwards: {reverse}"
    return _Task(question, reasoning, backwards, Expectation(TaskKind.REVERSE, text=backwards))


_JSON_KEY_SETS: tuple[tuple[str, ...], ...] = (
    ("name", "age"), ("name", "city"), ("name", "age", "city"), ("city", "age"),
)
_JSON_TYPES = {"name": "string", "age": "integer", "city": "string"}


def _json_extraction(rng: random.Random) -> _Task:
    person = {"name": rng.choice(NAMES), "age": rng.randint(18, 90), "city": rng.choice(CITIES)}
    sentence = rng.choice(
        ("{name} is {age} years old and lives in {city}.", "{name}, aged {age}, lives in {city}.",
         "Meet {name} from {city}, who is {age}.", "In {city} lives {name}, who turned {age} this year.")
    ).format(**person)
    keys = rng.choice(_JSON_KEY_SETS)
    shape = "{" + ", ".join(f'"{key}": {_JSON_TYPES[key]}' for key in keys) + "}"
    request = rng.choice(
        ("Reply only with JSON of the shape {shape}.", "Answer in JSON as {shape}.",
         "Extract {shape} as JSON.")
    ).format(shape=shape)
    question = f"{sentence} {request}" if rng.random() < 0.5 else f"{request}\n{sentence}"
    answer = {key: person[key] for key in keys}
    reasoning = "\n".join(f"{key}: {person[key]}" for key in keys)
    text = json.dumps(answer)
    return _Task(question, reasoning, text, Expectation(TaskKind.JSON_EXTRACTION, json_text=text))


def _tool_request(rng: random.Random) -> tuple[str, str, dict[str, Any], str]:
    """A question that needs a tool: (tool name, question, arguments, reasoning)."""
    name = rng.choice(TOOL_NAMES)
    if name == "convert_currency":
        source, target = rng.sample(sorted(CURRENCY_PER_USD), 2)
        amount = rng.randint(1, 999)
        question = rng.choice(
            ("How much is {n} {f} in {t}?", "Convert {n} {f} to {t}.", "What is {n} {f} worth in {t}?",
             "I have {n} {f}. How many {t} is that?")
        ).format(n=amount, f=source, t=target)
        arguments: dict[str, Any] = {"amount": amount, "from_currency": source, "to_currency": target}
        reasoning = f"The user wants {amount} {source} in {target}. I will call convert_currency."
        return name, question, arguments, reasoning
    city = rng.choice(CITIES)
    if name == "get_weather":
        question = rng.choice(
            ("What's the weather like in {c}?", "Is it raining in {c} right now?", "How warm is it in {c} today?",
             "Tell me the weather in {c}.")
        ).format(c=city)
        reasoning = f"The user asks about the weather in {city}. I will call get_weather."
    else:
        question = rng.choice(
            ("What time is it in {c}?", "What's the local time in {c}?", "Tell me the current time in {c}.",
             "Do you know the time in {c}?")
        ).format(c=city)
        reasoning = f"The user asks for the time in {city}. I will call lookup_time."
    return name, question, {"city": city}, reasoning


def _tool_call_message(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _tool_call(rng: random.Random) -> _Task:
    name, question, arguments, reasoning = _tool_request(rng)
    expectation = Expectation(
        TaskKind.TOOL_CALL, tool_name=name, tool_arguments=tuple((k, str(v)) for k, v in arguments.items())
    )
    return _Task(question, reasoning, None, expectation, (_tool_call_message(name, arguments),), tool_name=name)


def _tool_answer(rng: random.Random) -> _Task:
    name, question, arguments, call_reasoning = _tool_request(rng)
    if name == "get_weather":
        temperature, condition = rng.randint(-10, 35), rng.choice(WEATHER_CONDITIONS)
        payload = weather_payload(arguments["city"], temperature, condition)
        reasoning = f"The tool reports {temperature}°C and {condition}."
        content = f"It is {temperature}°C and {condition} in {arguments['city']}."
        facts: tuple[str, ...] = (f"{temperature}°C", condition)
    elif name == "convert_currency":
        result = convert_amount(arguments["amount"], arguments["from_currency"], arguments["to_currency"])
        payload = currency_payload(arguments["amount"], arguments["from_currency"], arguments["to_currency"], result)
        reasoning = f"The tool reports a result of {json.dumps(result)}."
        content = f"{arguments['amount']} {arguments['from_currency']} is {json.dumps(result)} {arguments['to_currency']}."
        facts = (json.dumps(result), arguments["to_currency"])
    else:
        time_text = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
        payload = time_payload(arguments["city"], time_text)
        reasoning = f"The tool reports {time_text}."
        content = f"It is {time_text} in {arguments['city']}."
        facts = (time_text,)
    call: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [_tool_call_message(name, arguments)]}
    if rng.random() < 0.5:
        call["reasoning_content"] = call_reasoning
    followup = (call, {"role": "tool", "content": payload})
    return _Task(question, reasoning, content, Expectation(TaskKind.TOOL_ANSWER, facts=facts),
                 followup=followup, tool_name=name)


_MAKERS: dict[TaskKind, Callable[[random.Random], _Task]] = {
    TaskKind.ADDITION: _addition,
    TaskKind.SUBTRACTION: _subtraction,
    TaskKind.UNIT_CONVERSION: _unit_conversion,
    TaskKind.COPY: _copy,
    TaskKind.REVERSE: _reverse,
    TaskKind.JSON_EXTRACTION: _json_extraction,
    TaskKind.TOOL_CALL: _tool_call,
    TaskKind.TOOL_ANSWER: _tool_answer,
}


def _offered_tools(rng: random.Random, needed: str | None) -> tuple[dict[str, Any], ...]:
    """Tools needed by the task plus distractors (2 or 3 in all), or for other tasks sometimes some."""
    if needed is None:
        if rng.random() >= 0.2:
            return ()
        names = rng.sample(TOOL_NAMES, rng.randint(1, len(TOOL_NAMES)))
    else:
        others = [name for name in TOOL_NAMES if name != needed]
        names = [needed, *rng.sample(others, rng.randint(1, len(others)))]
        rng.shuffle(names)
    return tuple(TOOL_SCHEMAS[name] for name in names)


def _history(rng: random.Random) -> tuple[dict[str, Any], ...]:
    """An earlier, already answered exchange (assistant history carries no reasoning)."""
    earlier = _MAKERS[rng.choice((TaskKind.ADDITION, TaskKind.COPY, TaskKind.UNIT_CONVERSION))](rng)
    return ({"role": "user", "content": earlier.question}, {"role": "assistant", "content": earlier.content})


def build_example(kind: TaskKind, rng: random.Random) -> Example:
    """One example of `kind`, with a random system prompt, offered tools and history."""
    task = _MAKERS[kind](rng)
    messages: list[dict[str, Any]] = []
    if rng.random() < 0.4:
        messages.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
    tools = _offered_tools(rng, task.tool_name)
    if rng.random() < 0.1:
        messages.extend(_history(rng))
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
    """Example `index` of `seed`, its kind drawn from `kinds` (default: the training mixture)."""
    weights = kinds or TRAINING_WEIGHTS
    rng = example_rng(seed, index)
    kind = rng.choices(list(weights), weights=list(weights.values()))[0]
    return build_example(kind, rng)


def held_out_examples(seed: int, count: int) -> list[Example]:
    """`count` evaluation examples, the kinds taken in turn so that each gets an equal share."""
    kinds = list(TaskKind)
    return [build_example(kinds[index % len(kinds)], example_rng(seed, index)) for index in range(count)]
