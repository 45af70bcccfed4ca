"""Tool tasks of the demo (host side): call the right tool of the offered ones, answer from a tool's
result, or answer plainly when no offered tool fits.

The offered tools are schemas drawn from the generated tool space (`helios.demo.toolspace`) in the
prompt's split, one to four of them, in random order; the reasoning names what the user wants and
the tool that does it, so picking the tool is reading the rendered schemas.
"""

from __future__ import annotations

import json
import random
from typing import Any

from helios.demo.kinds import Expectation, Split, Task, TaskKind
from helios.demo.phrasing import dress
from helios.demo.tool_concepts import CONCEPTS
from helios.demo.toolspace import (
    Concept,
    DrawnTool,
    call_arguments,
    draw_tool,
    held_out_names,
    pick_request,
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


def offer(rng: random.Random, needed: DrawnTool | None, excluded: Concept, split: Split,
          most: int = 4) -> tuple[dict[str, Any], ...]:
    """The needed tool (if any) among distractors of other concepts, 1..`most` tools in all."""
    least = 1 if needed is not None else 0
    count = rng.randint(least, most + (split is Split.TRAIN))  # training offers up to one more distractor
    tools = _distractors(rng, excluded, count - least, split) + ([needed] if needed is not None else [])
    rng.shuffle(tools)
    return tuple(tool.schema for tool in tools)


def random_tools(rng: random.Random, split: Split, most: int = 3) -> tuple[dict[str, Any], ...]:
    """Tools offered to a task that needs none (1..`most` of them)."""
    concepts = rng.sample(CONCEPTS, rng.randint(1, most))
    return tuple(draw_tool(concept, rng, split, held_out_names(tuple(CONCEPTS))).schema for concept in concepts)


def _request(rng: random.Random, split: Split) -> tuple[Concept, DrawnTool, str, dict[str, Any], str, str]:
    concept = rng.choice(CONCEPTS)
    tool = draw_tool(concept, rng, split, held_out_names(tuple(CONCEPTS)))
    template = pick_request(tool, rng, split)
    values, spoken = concept.draw(rng)
    question = dress(rng, template.format(**spoken), split, casing=False)
    arguments = call_arguments(tool, template, values)
    reasoning = f"The user wants {concept.gist.format(**spoken)}. {tool.name} does that."
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
