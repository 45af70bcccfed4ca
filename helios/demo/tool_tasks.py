"""Tool tasks of the demo (host side): call the right tool of the offered ones, answer from a tool's
result, or answer plainly when no offered tool fits.

The offered tools are schemas drawn from the generated tool space (`helios.demo.toolspace`) in the
prompt's split, one to four of them, in random order; the reasoning names what the user wants and
the tool that does it, so picking the tool is reading the rendered schemas.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

from helios.demo.kinds import Expectation, Split, Task, TaskKind
from helios.demo.phrasing import dress, spell
from helios.demo.tool_concepts import CONCEPTS
from helios.demo.toolspace import (
    Concept,
    DrawnTool,
    Spoken,
    Values,
    call_arguments,
    decoy_name,
    draw_tool,
    held_out_names,
    near_miss,
    pick_request,
    renamed,
    rendered_value,
)

NO_FITTING_TOOL = "Sorry, none of the available tools can do that."
NO_TOOLS = "Sorry, I can't do that: I have no tool for it."
ANSWER_REASONING = "The tool returned its result."


def call_message(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _distractors(rng: random.Random, excluded: Concept, count: int, split: Split) -> list[DrawnTool]:
    others = [concept for concept in CONCEPTS if concept is not excluded]
    return [draw_tool(concept, rng, split, held_out_names(tuple(CONCEPTS))) for concept in rng.sample(others, count)]


NEAR_MISS_SHARE = 0.4  # training calls whose distractors include names a step away from the needed one


def _renamed(rng: random.Random, needed: DrawnTool, distractors: list[DrawnTool], excluded: Concept,
             split: Split, wanted: int, name: Callable[[], str | None]) -> list[DrawnTool]:
    """`distractors` with `wanted` of them (added if need be) renamed by `name()`: a name already in
    the offer (or None) leaves its distractor as it was, so the offer's names stay distinct."""
    if len(distractors) < wanted:
        distractors = distractors + _distractors(rng, excluded, wanted - len(distractors), split)
    taken = {needed.name} | {tool.name for tool in distractors}
    for index in rng.sample(range(len(distractors)), wanted):
        new = name()
        if new is not None and new not in taken:
            taken.add(new)
            distractors[index] = renamed(distractors[index], new)
    return distractors


def _near_misses(rng: random.Random, needed: DrawnTool, distractors: list[DrawnTool], excluded: Concept,
                 split: Split) -> list[DrawnTool]:
    """`distractors` with one to three of them (added if need be) renamed to near misses of the needed
    tool's name (another style, a word swapped, added or dropped), so only the exact name copied
    from the schema whose description fits is right."""
    held_functions, _ = held_out_names(tuple(CONCEPTS))
    return _renamed(rng, needed, distractors, excluded, split, rng.choice((1, 1, 2, 3)),
                    lambda: near_miss(rng, needed.name, held_functions))


DECOY_SHARE = 0.3  # training offers where distractors are named with words of the needed concept


def _decoys(rng: random.Random, needed: DrawnTool, distractors: list[DrawnTool], excluded: Concept,
            split: Split) -> list[DrawnTool]:
    """`distractors` with one or two of them (added if need be) renamed with words of the needed
    concept (a reminder request beside a `setAlert` that is the timer), so the tool to call is the
    one whose description fits the request, not the one whose name echoes it."""
    held_functions, _ = held_out_names(tuple(CONCEPTS))
    return _renamed(rng, needed, distractors, excluded, split, rng.choice((1, 1, 2)),
                    lambda: decoy_name(rng, needed.concept, held_functions))


def offer(rng: random.Random, needed: DrawnTool | None, excluded: Concept, split: Split,
          most: int = 4) -> tuple[dict[str, Any], ...]:
    """The needed tool (if any) among distractors of other concepts, 1..`most` tools in all; in
    training, often distractors named almost like the needed tool."""
    least = 1 if needed is not None else 0
    count = rng.randint(least, most + (split is Split.TRAIN))  # training offers up to one more distractor
    distractors = _distractors(rng, excluded, count - least, split)
    if needed is not None and split is Split.TRAIN and rng.random() < NEAR_MISS_SHARE:
        distractors = _near_misses(rng, needed, distractors, excluded, split)
    elif needed is not None and split is Split.TRAIN and rng.random() < DECOY_SHARE / (1 - NEAR_MISS_SHARE):
        distractors = _decoys(rng, needed, distractors, excluded, split)
    tools = distractors + ([needed] if needed is not None else [])
    rng.shuffle(tools)
    return tuple(tool.schema for tool in tools)


def random_tools(rng: random.Random, split: Split, most: int = 3) -> tuple[dict[str, Any], ...]:
    """Tools offered to a task that needs none (1..`most` of them)."""
    concepts = rng.sample(CONCEPTS, rng.randint(1, most))
    return tuple(draw_tool(concept, rng, split, held_out_names(tuple(CONCEPTS))).schema for concept in concepts)


_LIST_JOINS = ((", ", " and "), (", ", ", and "), (", ", " & "), (" and ", " and "), (", ", " plus "), (", ", ", "))


def spoken_forms(rng: random.Random, values: Values, spoken: Spoken) -> Spoken:
    """`spoken` with argument values said in other surface forms: whole numbers up to 99 sometimes
    in words, lists joined in another way ("a, b, and c", "a & b", "a and b and c")."""
    varied = dict(spoken)
    for role, value in values.items():
        if isinstance(value, int) and not isinstance(value, bool) and spoken.get(role) == str(value) \
                and 0 <= value <= 99 and rng.random() < 0.25:
            varied[role] = spell(value)
        elif isinstance(value, list) and len(value) > 1 and rng.random() < 0.5:
            comma, last = rng.choice(_LIST_JOINS)
            varied[role] = comma.join(value[:-1]) + last + value[-1]
    return varied


def _request(rng: random.Random, split: Split) -> tuple[Concept, DrawnTool, str, dict[str, Any], str, str]:
    concept = rng.choice(CONCEPTS)
    tool = draw_tool(concept, rng, split, held_out_names(tuple(CONCEPTS)))
    template = pick_request(tool, rng, split)
    values, spoken = concept.draw(rng)
    if split is Split.TRAIN:
        spoken = spoken_forms(rng, values, spoken)
    question = dress(rng, template.format(**spoken), split, casing=False)
    arguments = call_arguments(tool, template, values)
    # NOTE: in training the tool's name starts a line, so its first word is the same token as in the
    # schema (after `>`) and in the call (after `=`); after a space it is another token. Held-out
    # prompts keep the space: an answered call's reasoning is part of their text, which is fixed.
    joint = "\n" if split is Split.TRAIN else " "
    reasoning = f"The user wants {concept.gist.format(**spoken)}.{joint}{tool.name} does that."
    return concept, tool, question, arguments, reasoning, template


def tool_call(rng: random.Random, split: Split) -> Task:
    concept, tool, question, arguments, reasoning, _ = _request(rng, split)
    # after the tool as the schema spells it, each argument under the schema's parameter name
    reasoning = "\n".join((reasoning, *(f"{name}: {rendered_value(value)}" for name, value in arguments.items())))
    expectation = Expectation(TaskKind.TOOL_CALL, tool_name=tool.name,
                              tool_arguments=tuple((name, rendered_value(value)) for name, value in arguments.items()))
    return Task(question, reasoning, None, expectation, tool_calls=(call_message(tool.name, arguments),),
                tools=offer(rng, tool, concept, split))


def tool_answer(rng: random.Random, split: Split) -> Task:
    concept, tool, question, arguments, call_reasoning, template = _request(rng, split)
    roles = {role: name for role, name in tool.names.items() if name in arguments}
    values = {role: arguments[name] for role, name in roles.items()}
    payload, content, facts = concept.answer(rng, values)
    call: dict[str, Any] = {"role": "assistant", "content": None, "tool_calls": [call_message(tool.name, arguments)]}
    if rng.random() < 0.5:
        call["reasoning_content"] = call_reasoning
    followup = (call, {"role": "tool", "content": json.dumps(payload, ensure_ascii=False)})
    return Task(question, ANSWER_REASONING, content, Expectation(TaskKind.TOOL_ANSWER, facts=facts),
                followup=followup, tools=offer(rng, tool, concept, split))


def no_tool(rng: random.Random, split: Split) -> Task:
    """A request no offered tool can serve (sometimes no tool is offered at all): a plain refusal."""
    concept = rng.choice(CONCEPTS)
    pool = concept.requests.train if split is Split.TRAIN else concept.requests.held_out
    _, spoken = concept.draw(rng)
    question = dress(rng, rng.choice(pool).format(**spoken), split, casing=False)
    tools = offer(rng, None, concept, split, most=3)
    gist = concept.gist.format(**spoken)
    if tools:
        reasoning, content = f"The user wants {gist}. None of the tools does that.", NO_FITTING_TOOL
    else:
        reasoning, content = f"The user wants {gist}. I have no tool for that.", NO_TOOLS
    return Task(question, reasoning, content, Expectation(TaskKind.NO_TOOL, facts=("Sorry",)), tools=tools)
