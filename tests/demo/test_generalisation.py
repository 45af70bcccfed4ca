"""The demo corpus's generalisation levers: generated tool and JSON names copied from the prompt,
held-out names and phrasings kept out of training, composed phrasings that cover every intent."""

from __future__ import annotations

import random
import re

import pytest

from helios.demo import arithmetic, conversation, records
from helios.demo.corpus import HELD_OUT_COUNT, HELD_OUT_SEED, held_out_questions, training_examples
from helios.demo.kinds import Split, TaskKind
from helios.demo.phrasing import DISTRACTORS, EmptyPhrasings, Phrasings, compose, distract, typo
from helios.demo.tasks import build_example, held_out_examples, make_example
from helios.demo.tool_concepts import CONCEPTS
from helios.demo.toolspace import draw_tool, held_out_names

TRAINING = 4000


@pytest.fixture(scope="module")
def training():
    return list(training_examples(0, 0, TRAINING))


def _tool_names(examples):
    functions, parameters = set(), set()
    for example in examples:
        for tool in example.tools:
            functions.add(tool["function"]["name"])
            parameters.update(tool["function"]["parameters"]["properties"])
    return functions, parameters


def test_composition_is_deterministic_and_skips_held_out():
    frames = ("[v] [o]: {s}", "Can you [v] {s}?")
    lexicon = {"v": ("repeat", "copy"), "o": ("this", "")}
    composed = compose(frames, lexicon, held_out=("copy THIS: {s}",))
    assert composed == compose(frames, lexicon, held_out=("copy THIS: {s}",))
    assert composed == ("Repeat this: {s}", "Repeat: {s}", "Copy: {s}", "Can you repeat {s}?", "Can you copy {s}?")
    assert len(compose(("[v] [o] [v] [o]",), lexicon, cap=3)) == 3
    with pytest.raises(EmptyPhrasings):
        Phrasings(train=compose(frames, lexicon), held_out=("Copy: {s}",))


def test_typos_leave_slots_and_short_words_alone():
    rng = random.Random(0)
    for _ in range(200):
        noisy = typo(rng, "Please repeat {s} exactly")
        assert "{s}" in noisy and noisy != "Please repeat {s} exactly"
        assert len(noisy.split()) == 4
    assert typo(rng, "{a} + {b}") == "{a} + {b}"
    for _ in range(50):
        words = distract(rng, "Please repeat {s} exactly").split()
        assert len(words) == 5 and "{s}" in words and set(words) - {"Please", "repeat", "{s}", "exactly"} <= set(DISTRACTORS)
        assert words[0] == "Please" and words[3:] == ["{s}", "exactly"]  # never beside the slot
    assert distract(rng, "{a} + {b}") == "{a} + {b}"


def test_training_tool_schemas_never_carry_a_held_out_name(training):
    held_functions, held_parameters = held_out_names(tuple(CONCEPTS))
    functions, parameters = _tool_names(training)
    assert not functions & held_functions
    assert not parameters & held_parameters
    # and the held-out prompts do offer those names: the check is not vacuous
    offered_functions, offered_parameters = _tool_names(held_out_examples(HELD_OUT_SEED, HELD_OUT_COUNT))
    assert offered_functions <= held_functions and offered_parameters <= held_parameters


def test_training_tool_names_are_drawn_from_a_large_space(training):
    calls = [example for example in training if example.kind is TaskKind.TOOL_CALL]
    names = {example.expectation.tool_name for example in calls}
    assert len(names) > 0.7 * len(calls)  # nearly every call names a tool never seen before
    concept_names = {name for concept in CONCEPTS for name in concept.function_names(Split.TRAIN)}
    assert len(names - concept_names) > 0.4 * len(names)  # many generated, unrelated to the concept's words
    for example in calls:  # the called tool is one of several offered, its arguments the schema's parameters
        offered = {tool["function"]["name"]: tool for tool in example.tools}
        schema = offered[example.expectation.tool_name]["function"]["parameters"]["properties"]
        assert {name for name, _ in example.expectation.tool_arguments} <= set(schema)
    assert sum(len(example.tools) > 1 for example in calls) > 0.6 * len(calls)


def test_generated_tools_are_deterministic():
    first = [draw_tool(concept, random.Random(7), Split.TRAIN, held_out_names(tuple(CONCEPTS))).schema for concept in CONCEPTS]
    assert first == [draw_tool(concept, random.Random(7), Split.TRAIN, held_out_names(tuple(CONCEPTS))).schema for concept in CONCEPTS]
    assert make_example(0, 123) == make_example(0, 123)


def test_json_keys_are_copied_from_the_request(training):
    held = {key for synonyms, _ in records.FIELDS.values()
            for key in records.split_options(synonyms, Split.HELD_OUT)}
    extractions = [example for example in training if example.kind is TaskKind.JSON_EXTRACTION]
    import json

    keys = {key for example in extractions for key in json.loads(example.expectation.json_text)}
    assert not keys & held
    synonyms = {key for names, _ in records.FIELDS.values() for key in names}
    assert len(keys - synonyms) > 20
    for example in extractions:
        for key in json.loads(example.expectation.json_text):
            assert f'"{key}"' in example.question


def test_every_intent_has_a_wide_training_pool_and_its_own_held_out_half():
    pools = {
        "copy": records.COPY, "reverse": records.REVERSE, "json request": records.REQUESTS,
        "addition": arithmetic.ADDITION, "subtraction": arithmetic.SUBTRACTION,
        "multiplication": arithmetic.MULTIPLICATION, "division": arithmetic.DIVISION,
        "conversion": arithmetic.CONVERSION, "out of domain": conversation.OUT_OF_DOMAIN,
        **{f"small talk {name}": entry[0] for name, entry in conversation.SMALL_TALK.items()},
        **{f"identity {name}": entry[0] for name, entry in conversation.IDENTITY.items()},
        **{f"follow-up {name}": pool for name, pool in conversation.FOLLOW_UPS.items()},
        "name": conversation.NAME_ASK, "city": conversation.CITY_ASK,
    }
    for name, pool in pools.items():
        assert len(pool.train) >= 100, name
        bare = {text.lower().strip(" ?.!") for text in pool.train}
        assert not {text.lower().strip(" ?.!") for text in pool.held_out} & bare, name


def test_every_kind_is_in_the_training_stream(training):
    assert {example.kind for example in training} == set(TaskKind)
    assert not {example.question for example in training} & held_out_questions()


@pytest.mark.parametrize("question", ["What is 6 * 7?", "What is 100 - 1?", "Convert 5 km to meters",
                                      "Hello! Who are you?"])
def test_the_issues_newcomer_prompts_are_covered_by_composition(question):
    pools = (arithmetic.MULTIPLICATION, arithmetic.SUBTRACTION, arithmetic.CONVERSION,
             conversation.IDENTITY["who"][0])
    forms = {template.format(a="6", b="7").lower() for template in pools[0].train}
    forms |= {template.format(a="100", b="1").lower() for template in pools[1].train}
    forms |= {template.format(n=5, s="km", t="meters").lower() for template in pools[2].train}
    forms |= {template.lower() for template in pools[3].train}
    assert question.lower() in forms or question.lower().rstrip("?") in forms


def test_the_weather_tool_of_the_readme_is_a_training_schema():
    weather = next(concept for concept in CONCEPTS if concept.key == "weather")
    rng = random.Random(0)
    descriptions = {draw_tool(weather, rng, Split.TRAIN, held_out_names(tuple(CONCEPTS))).schema["function"]["description"] for _ in range(300)}
    assert "Current weather for a city" in descriptions
    assert "What is the weather in {city}?" in weather.requests.train
    example = build_example(TaskKind.TOOL_CALL, random.Random(1))
    assert example.reply["reasoning_content"].count("\n") >= len(example.expectation.tool_arguments)


def test_training_tool_names_come_in_every_style_with_near_misses_beside_them(training):
    from helios.demo.toolspace import name_words

    calls = [example for example in training if example.kind is TaskKind.TOOL_CALL]
    names = [example.expectation.tool_name for example in calls]
    assert any("-" in name for name in names) and any("." in name for name in names)
    assert any(name[:1].isupper() for name in names) and any(any(c.isdigit() for c in name) for name in names)
    # a distractor named with the needed tool's words (or one word off) makes copying the only way
    near = [example for example in calls
            if any(tool["function"]["name"] != example.expectation.tool_name
                   and len(set(name_words(tool["function"]["name"])) ^ set(name_words(example.expectation.tool_name))) <= 2
                   for tool in example.tools)]
    assert 0.2 * len(calls) < len(near) < 0.6 * len(calls)
    for example in calls:  # the name starts a line of the reasoning: the same tokens as in the schema
        assert f"\n{example.expectation.tool_name} does that." in example.reply["reasoning_content"]


def _operation_forms(pool):
    return {re.sub(r"[\s?.!,:=]+", " ", template.lower()).strip() for template in pool.train}


def test_each_operation_has_a_lexicon_of_its_own_with_the_operand_order_it_implies():
    pools = {"add": arithmetic.ADDITION, "subtract": arithmetic.SUBTRACTION,
             "multiply": arithmetic.MULTIPLICATION, "divide": arithmetic.DIVISION}
    forms = {operation: _operation_forms(pool) for operation, pool in pools.items()}
    for operation, commands in arithmetic._COMMANDS.items():
        assert len(commands) >= 8 and len(arithmetic._MORE_EXPRESSIONS[operation]) >= 10
        others = set().union(*(forms[other] for other in forms if other != operation))
        assert not forms[operation] & others, operation  # no wording is read as two operations
    # a synonym says which operand comes first: "remove {b} from {a}" is a - b, so {b} is written first
    assert any(text.startswith("remove {b} from {a}") for text in forms["subtract"])
    assert any(text.startswith("the total of {a} and {b}") for text in forms["add"])
    assert any("{a} shared among {b}" in text for text in forms["divide"])
    for template in arithmetic.SUBTRACTION.train:
        if template.index("{b}") < template.index("{a}"):
            assert re.search(r"\{b\} (\w+ )?(from|off|less than|up to)", template), template


def test_identity_questions_come_in_many_forms_and_never_as_small_talk():
    who = conversation.IDENTITY["who"][0].train
    lowered = [template.lower() for template in who]
    assert any("exactly" in text for text in lowered) and any("really" in text for text in lowered)
    assert any(re.search(r"tell me who you are|know what you are", text) for text in lowered)
    assert any("what kind of program are you" in text for text in lowered)
    talk = {text.lower().strip(" ?.!:)") for phrasings, *_ in conversation.SMALL_TALK.values() for text in phrasings.train}
    identity = {text.lower().strip(" ?.!:)") for phrasings, *_ in conversation.IDENTITY.values() for text in phrasings.train}
    assert not talk & identity


# Digests of the held-out and validation prompts as rendered (prompt + completion): the evaluation
# stays byte-identical whatever the training generator adds.
HELD_OUT_DIGESTS = {1: "48e771642ebe47cc5ddea3b75c049779fddce9359d2166d8025affcab386f2c3",
                    2: "f492804ab79efe1dcf5bce511f3bbebb6f56a9f9865c49c666c5f02ddf66e5ef"}


def test_held_out_prompts_are_byte_identical():
    import hashlib

    from helios.demo.corpus import render_pair

    for seed, digest in HELD_OUT_DIGESTS.items():
        state = hashlib.sha256()
        for example in held_out_examples(seed, HELD_OUT_COUNT):
            pair = render_pair(example)
            state.update((pair.prompt + pair.completion).encode())
        assert state.hexdigest() == digest, seed


@pytest.mark.parametrize("word", ["equal", "equals", "what", "is", "does", "makes", "result", "answer"])
def test_words_that_name_no_operation_come_with_every_operation_alike(word):
    # a word every operation is asked with, in about the same share of each one's phrasings, so an
    # unseen sentence around it is read by its operation words ("What's a * b equal to?" is a product)
    pools = (arithmetic.ADDITION, arithmetic.SUBTRACTION, arithmetic.MULTIPLICATION, arithmetic.DIVISION)
    shares = [sum(bool(re.search(rf"\b{word}\b", text.lower())) for text in pool.train) / len(pool.train)
              for pool in pools]
    assert min(shares) > 0 and max(shares) < 1.5 * min(shares), shares
