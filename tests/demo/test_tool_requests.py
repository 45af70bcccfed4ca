"""Composed tool requests, descriptions and offers: indirect requests for every concept, descriptions
in composed words, distractors named with the needed concept's words, argument values in several
surface forms, affixed names and keys."""

from __future__ import annotations

import json
import random
import re

import pytest

from helios.demo import records
from helios.demo.kinds import Split, TaskKind
from helios.demo.phrasing import spell
from helios.demo.tasks import build_example
from helios.demo.tool_concepts import CONCEPTS
from helios.demo.tool_descriptions import WORDINGS, descriptions, third_person
from helios.demo.tool_requests import INTENTS, Intent, requests
from helios.demo.tool_tasks import spoken_forms
from helios.demo.toolspace import (
    NAME_AFFIXES,
    _slots,
    draw_tool,
    held_out_names,
    name_words,
    split_options,
    undecorated,
)


@pytest.fixture(scope="module")
def calls():
    return [build_example(TaskKind.TOOL_CALL, random.Random(f"requests:{index}")) for index in range(1500)]


@pytest.mark.parametrize("concept", CONCEPTS, ids=lambda concept: concept.key)
def test_every_concept_is_asked_for_indirectly(concept):
    train = concept.requests.train
    required = {parameter.role for parameter in concept.parameters if parameter.required}
    lowered = [template.lower() for template in train]
    # questions about how to do it, asks of the assistant, third persons, needs stated as situations
    assert any(text.startswith("how do i ") for text in lowered)
    assert any(text.startswith(("can you ", "could you ")) for text in lowered)
    assert any(re.match(r"my (wife|friend|boss|colleague|sister|brother) (wants|needs|asked)", text) for text in lowered)
    needs = [template for template in train if any(template.lower().startswith(need.lower()[:12])
                                                   for need in INTENTS[concept.key].needs)]
    assert len(needs) >= 10
    assert len(train) >= 300
    for template in train:
        assert required <= _slots(template)
    held = {re.sub(r"[^a-z0-9{}]+", " ", text.lower()).strip() for text in concept.requests.held_out}
    assert not held & {re.sub(r"[^a-z0-9{}]+", " ", text.lower()).strip() for text in train}


def test_intents_compose_deterministically_with_clauses_for_optional_roles():
    intent = Intent(actions=("book {x}",), things=("a {x}",), needs=("I lack {x}",), clauses=("", "For {y}."))
    composed = requests(intent, held_out=("How do I book {x}?",))
    assert composed == requests(intent, held_out=("How do I book {x}?",))
    assert "How do I book {x}?" not in composed and "How do I book {x}? For {y}." in composed
    assert "I lack {x}. Can you sort it out?" in composed


def test_distractors_are_named_with_words_of_the_needed_concept(calls):
    decoyed = 0
    for example in calls:
        needed = example.expectation.tool_name
        description = next(tool["function"]["description"] for tool in example.tools
                           if tool["function"]["name"] == needed)
        concept = next(c for c in CONCEPTS if undecorated(description) in c.descriptions + c.composed_descriptions)
        words = {word for noun in concept.nouns for word in noun.split("_")}
        for tool in example.tools:
            other = tool["function"]["name"]
            if other != needed and set(name_words(other)) & words and \
                    not set(name_words(other)) & set(name_words(needed)):
                decoyed += 1
                break
    # a distractor of another concept named like the request's concept, the call still the needed tool
    assert decoyed > 0.1 * len(calls)


def test_argument_values_come_in_several_surface_forms():
    rng = random.Random(0)
    values, spoken = {"minutes": 7, "items": ["milk", "eggs", "bread"]}, {"minutes": "7", "items": "milk, eggs and bread"}
    forms = [spoken_forms(rng, values, spoken) for _ in range(400)]
    assert {form["minutes"] for form in forms} == {"7", spell(7)}
    joined = {form["items"] for form in forms}
    assert {"milk, eggs, and bread", "milk, eggs & bread", "milk and eggs and bread"} <= joined
    assert all(all(item in text for item in values["items"]) for text in joined)
    assert spoken_forms(rng, {"on": True}, {"on": "on"}) == {"on": "on"}


def test_generated_parameter_names_and_json_keys_take_affixes(calls):
    affixes = set(NAME_AFFIXES)
    parameters = {name for example in calls for tool in example.tools
                  for name in tool["function"]["parameters"]["properties"]}
    assert len({name for name in parameters if set(name_words(name)) & affixes}) > 100
    keys = set()
    for index in range(1500):
        example = build_example(TaskKind.JSON_EXTRACTION, random.Random(f"keys:{index}"), Split.TRAIN)
        keys.update(json.loads(example.expectation.json_text))
    synonyms = {key for names, _ in records.FIELDS.values() for key in names}
    affixed = {key for key in keys - synonyms if set(name_words(key)) & affixes}
    assert len(affixed) > 50
    assert {word for key in affixed for word in name_words(key)} & {"on", "at", "qty", "per", "max"}


def test_third_person_follows_the_verbs_ending():
    assert [third_person(action) for action in ("fetch the time", "look up a price", "carry on", "toggle it",
                                                "say hi", "mix", "go")] == \
        ["fetches the time", "looks up a price", "carries on", "toggles it", "says hi", "mixes", "goes"]


@pytest.mark.parametrize("concept", CONCEPTS, ids=lambda concept: concept.key)
def test_every_concept_is_described_in_composed_words_that_never_repeat_a_held_out_description(concept):
    composed = concept.composed_descriptions
    assert len(composed) >= 80
    wording = WORDINGS[concept.key]
    assert composed == descriptions(wording, split_options(concept.descriptions, Split.HELD_OUT))
    bare = {re.sub(r"[^a-z0-9]+", " ", text.lower()).strip() for text in composed}
    held = {re.sub(r"[^a-z0-9]+", " ", text.lower()).strip()
            for text in split_options(concept.descriptions, Split.HELD_OUT)}
    assert not bare & held
    # commands, third-person sentences and labels alike
    assert any(text.startswith(third_person(wording.actions[0])[:1].upper() + third_person(wording.actions[0])[1:])
               for text in composed)
    assert any(text.endswith((" tool", " service", " API")) for text in composed)


def test_training_schemas_carry_composed_and_written_descriptions_and_held_out_ones_neither():
    rng = random.Random(3)
    timer = next(concept for concept in CONCEPTS if concept.key == "timer")
    names = held_out_names(tuple(CONCEPTS))
    train = [undecorated(draw_tool(timer, rng, Split.TRAIN, names).schema["function"]["description"])
             for _ in range(400)]
    held = {draw_tool(timer, rng, Split.HELD_OUT, names).schema["function"]["description"] for _ in range(100)}
    written = split_options(timer.descriptions, Split.TRAIN)
    composed = sum(description in timer.composed_descriptions and description not in written
                   for description in train)
    assert 0.35 * len(train) < composed < 0.65 * len(train)
    assert all(description in timer.composed_descriptions or description in written for description in train)
    assert held == set(split_options(timer.descriptions, Split.HELD_OUT))
    assert not held & set(timer.composed_descriptions)
