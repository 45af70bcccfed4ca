"""The demo scorer on hand-written right and wrong answers, raw text and parsed replies alike."""

from __future__ import annotations

import pytest

from helios.demo.corpus import HELD_OUT_COUNT, render_pair
from helios.demo.scoring import parse_reply, score_reply, score_text, summarize
from helios.demo.tasks import Expectation, InvalidExpectation, TaskKind, held_out_examples

THINK = "<think>\nsome reasoning\n</think>\n\n"
WEATHER_CALL = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n</function>\n</tool_call>"
ADDITION = Expectation(TaskKind.ADDITION, number=117)
REVERSE = Expectation(TaskKind.REVERSE, text="olleh")
JSON_PERSON = Expectation(TaskKind.JSON_EXTRACTION, json_text='{"name": "Emma", "age": 38}')
WEATHER = Expectation(TaskKind.TOOL_CALL, tool_name="get_weather", tool_arguments=(("city", "New York"),))
CURRENCY = Expectation(
    TaskKind.TOOL_CALL, tool_name="convert_currency",
    tool_arguments=(("amount", "25"), ("from_currency", "USD"), ("to_currency", "EUR")),
)
ANSWER = Expectation(TaskKind.TOOL_ANSWER, facts=("18°C", "cloudy"))


@pytest.mark.parametrize(
    ("expectation", "text"),
    [
        (ADDITION, THINK + "60 + 57 = 117<|im_end|>"),
        (ADDITION, "The sum is 117."),
        (REVERSE, THINK + "olleh"),
        (JSON_PERSON, THINK + '{"age": 38, "name": "Emma"}'),
        (WEATHER, THINK + WEATHER_CALL + "<|im_end|>"),
        (CURRENCY, "<tool_call>\n<function=convert_currency>\n<parameter=amount>\n25.0\n</parameter>\n"
                   "<parameter=from_currency>\nUSD\n</parameter>\n<parameter=to_currency>\nEUR\n</parameter>\n"
                   "</function>\n</tool_call>"),
        (ANSWER, THINK + "It is 18°C and cloudy in Tokyo."),
    ],
)
def test_right_answers(expectation, text):
    verdict = score_text(expectation, text)
    assert verdict.correct, verdict.reason
    assert verdict.reason == "ok"


@pytest.mark.parametrize(
    ("expectation", "text", "reason"),
    [
        (ADDITION, THINK + "60 + 57 = 107", "final number 107"),
        (ADDITION, THINK + "I cannot say.", "no number"),
        (ADDITION, "<think>\n60 + 57 = 117", "never closes"),
        (REVERSE, THINK + "olle", "expected 'olleh'"),
        (JSON_PERSON, THINK + '{"name": "Emma", "age": 83}', "object"),
        (JSON_PERSON, THINK + "name: Emma", "not JSON"),
        (WEATHER, THINK + WEATHER_CALL.replace("get_weather", "lookup_time"), "called lookup_time"),
        (WEATHER, THINK + WEATHER_CALL.replace("New York", "York"), "argument city='York'"),
        (WEATHER, THINK + WEATHER_CALL.replace("city", "town"), "arguments ['town']"),
        (WEATHER, THINK + WEATHER_CALL + "\n" + WEATHER_CALL, "got 2 calls"),
        (WEATHER, THINK + "It is sunny.", "got 0 calls"),
        (WEATHER, THINK + WEATHER_CALL.replace("</tool_call>", ""), "never closes"),
        (WEATHER, THINK + WEATHER_CALL.replace("</parameter>\n", ""), "malformed"),
        (WEATHER, THINK + WEATHER_CALL + " and more", "follows tool call"),
        (ANSWER, THINK + "It is 18°C and sunny in Tokyo.", "misses ['cloudy']"),
        (ANSWER, THINK + WEATHER_CALL, "called get_weather where an answer was expected"),
    ],
)
def test_wrong_answers(expectation, text, reason):
    verdict = score_text(expectation, text)
    assert not verdict.correct
    assert reason in verdict.reason


def test_parsed_replies_from_a_server():
    assert score_reply(ADDITION, "60 + 57 = 117").correct
    openai_call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "New York"}'}}
    assert score_reply(WEATHER, None, [openai_call]).correct
    numeric = {"function": {"name": "convert_currency",
                            "arguments": {"amount": 25, "from_currency": "USD", "to_currency": "EUR"}}}
    assert score_reply(CURRENCY, "", [numeric]).correct
    broken = {"function": {"name": "get_weather", "arguments": "{city"}}
    assert "not JSON" in score_reply(WEATHER, None, [broken]).reason
    assert not score_reply(WEATHER, "It is sunny.", []).correct


def test_parse_reply_splits_reasoning_content_and_calls():
    parsed = parse_reply(THINK + WEATHER_CALL + "<|im_end|>")
    assert parsed.reasoning == "some reasoning"
    assert parsed.content == ""
    assert [(call.name, call.arguments) for call in parsed.tool_calls] == [("get_weather", (("city", "New York"),))]
    assert parse_reply("plain answer").reasoning is None


def test_every_reference_completion_scores_correct_and_summarizes_by_group():
    examples = held_out_examples(1, HELD_OUT_COUNT)
    verdicts = [score_text(example.expectation, render_pair(example).completion) for example in examples]
    report = summarize(verdicts)
    assert report["all"].correct == report["all"].total == HELD_OUT_COUNT
    share = HELD_OUT_COUNT // len(TaskKind)
    assert report["group:arithmetic"].total == 5 * share and report["group:tool_calls"].total == share
    assert report["group:rest"].total == 9 * share


def test_typed_arguments_compare_by_value():
    flags = Expectation(TaskKind.TOOL_CALL, tool_name="set_lights",
                        tool_arguments=(("on", "False"), ("items", '["milk", "eggs"]'), ("temperature", "21.5")))
    call = ("<tool_call>\n<function=set_lights>\n<parameter=on>\nFalse\n</parameter>\n<parameter=items>\n"
            '["milk", "eggs"]\n</parameter>\n<parameter=temperature>\n21.5\n</parameter>\n</function>\n</tool_call>')
    assert score_text(flags, THINK + call).correct
    served = {"function": {"name": "set_lights", "arguments": {"on": False, "items": ["milk", "eggs"], "temperature": 21.5}}}
    assert score_reply(flags, None, [served]).correct
    wrong = {"function": {"name": "set_lights", "arguments": {"on": True, "items": ["milk", "eggs"], "temperature": 21.5}}}
    assert "argument on" in score_reply(flags, None, [wrong]).reason
    reordered = {"function": {"name": "set_lights", "arguments": {"on": False, "items": ["eggs", "milk"], "temperature": 21.5}}}
    assert "argument items" in score_reply(flags, None, [reordered]).reason


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (THINK + "Sorry, none of the available tools can do that.", "ok"),
        (THINK + "Sorry 4 5", "ok"),
        (THINK + "1 2 3", "holds no words"),
        (THINK + "Sorry \x07", "unprintable"),
        (THINK + "Sorry <function=x>", "markup"),
        (THINK + "I can do that.", "misses ['Sorry']"),
    ],
)
def test_worded_answers_must_be_printable_prose(text, reason):
    verdict = score_text(Expectation(TaskKind.NO_TOOL, facts=("Sorry",)), text)
    assert reason in verdict.reason


def test_expectations_carry_exactly_their_kinds_fields():
    with pytest.raises(InvalidExpectation, match="addition"):
        Expectation(TaskKind.ADDITION, text="117")
    with pytest.raises(InvalidExpectation, match="tool_call"):
        Expectation(TaskKind.TOOL_CALL, tool_name="get_weather")
    assert Expectation(TaskKind.MULTI_TURN, number=42).number == 42
    assert Expectation(TaskKind.MULTI_TURN, facts=("Alice",)).facts == ("Alice",)
    with pytest.raises(InvalidExpectation, match="multi_turn"):
        Expectation(TaskKind.MULTI_TURN, number=42, facts=("Alice",))
