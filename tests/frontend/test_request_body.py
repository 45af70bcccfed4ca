"""Request bodies that used to raise past the handler (issue findings 1, 2, 4, 5, 10): a lone
surrogate in any string, deep nesting, NaN, malformed tool schemas, tool-call arguments that are not
an object, prompt ids past the vocabulary, and calls of functions the request never offered. Each is
one `RequestFieldError` naming the field, or (the last) plain content."""

from __future__ import annotations

import json

import pytest

from helios.frontend.detokenize import Piece
from helios.frontend.errors import (
    InvalidFieldType,
    InvalidFieldValue,
    InvalidJSON,
    InvalidText,
    InvalidToolSchema,
    NestingTooDeep,
    NonFiniteNumber,
    RequestFieldError,
)
from helios.frontend.openai_request import parse_chat_request
from helios.frontend.pipeline import OutputPipeline
from helios.frontend.preparation import Preparer
from helios.frontend.request_body import MAX_JSON_DEPTH, decode_body
from tests.frontend import tinyfront

USER = [{"role": "user", "content": "Hi"}]
TOOL = tinyfront.WEATHER_TOOL
LONE = "a\\ud800b"  # JSON text of a string holding a lone high surrogate

# (JSON text of the body, with LONE placed in one string field) -> the param the 400 names
SURROGATES = [
    ('{"messages": [{"role": "user", "content": "%s"}]}', "messages.0.content"),
    ('{"messages": [{"role": "user", "content": [{"type": "text", "text": "%s"}]}]}', "messages.0.content.0.text"),
    ('{"prompt": "%s"}', "prompt"),
    ('{"messages": [], "stop": "%s"}', "stop"),
    ('{"messages": [], "stop": ["x", "%s"]}', "stop.1"),
    ('{"messages": [], "tools": [{"type": "function", "function": {"name": "%s"}}]}', "tools.0.function.name"),
    ('{"messages": [], "tools": [{"type": "function", "function": {"name": "f", "description": "%s"}}]}',
     "tools.0.function.description"),
    ('{"messages": [], "response_format": {"type": "json_schema", "json_schema": {"schema": {"enum": ["%s"]}}}}',
     "response_format.json_schema.schema.enum.0"),
    ('{"messages": [], "model": "%s"}', "model"),
    ('{"messages": [], "%s": 1}', "body"),  # a key: reported at its parent
]


@pytest.mark.parametrize("template, param", SURROGATES)
def test_a_lone_surrogate_anywhere_is_invalid_text_naming_the_field(template: str, param: str) -> None:
    with pytest.raises(InvalidText) as error:
        decode_body((template % LONE).encode())
    assert error.value.param == param and "surrogate" in str(error.value)


def test_surrogate_pairs_are_text() -> None:
    body = decode_body(b'{"messages": [{"role": "user", "content": "\\ud83d\\ude00"}]}')
    assert body["messages"][0]["content"] == "\N{GRINNING FACE}"


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 1_000, 100_000])
def test_deep_nesting_is_rejected(depth: int) -> None:
    raw = ('{"messages": ' + "[" * depth + "]" * depth + "}").encode()
    with pytest.raises(NestingTooDeep) as error:
        decode_body(raw)
    assert error.value.param.startswith(("body", "messages"))


def test_nesting_up_to_the_limit_decodes() -> None:
    depth = MAX_JSON_DEPTH - 1  # the body object is the first level
    body = decode_body(('{"x": ' + "[" * depth + "]" * depth + "}").encode())
    assert isinstance(body["x"], list)


@pytest.mark.parametrize("raw", [b"{", b"\xff\xfe\x00", b'{"a": 1} x', b""])
def test_not_json_is_invalid_json(raw: bytes) -> None:
    with pytest.raises(InvalidJSON) as error:
        decode_body(raw)
    assert error.value.param == "body"


@pytest.mark.parametrize("name", ["temperature", "top_p", "min_p", "presence_penalty", "frequency_penalty",
                                  "repetition_penalty"])  # fmt: skip
@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinities_name_their_field(name: str, constant: str) -> None:
    raw = f'{{"messages": [{{"role": "user", "content": "Hi"}}], "{name}": {constant}}}'.encode()
    with pytest.raises(NonFiniteNumber) as error:
        decode_body(raw)
    assert error.value.param == name
    with pytest.raises(RequestFieldError) as parsed:  # the parser refuses them too, decoded without the check
        parse_chat_request({"messages": USER, name: float(constant.replace("Infinity", "inf"))})
    assert parsed.value.param == name


def _tool(parameters) -> dict:
    return {"type": "function", "function": {"name": "lookup", "parameters": parameters}}


@pytest.mark.parametrize(
    "parameters, param",
    [
        ({"type": "object", "properties": ["city"]}, "tools.0.function.parameters.properties"),
        ({"type": "object", "properties": {"city": "string"}}, "tools.0.function.parameters.properties.city"),
        ({"properties": {"city": {"type": 5}}}, "tools.0.function.parameters.properties.city.type"),
        ({"type": "object", "required": 5}, "tools.0.function.parameters.required"),
        ({"type": "object", "required": ["city", 5]}, "tools.0.function.parameters.required.1"),
        ({"type": "array"}, "tools.0.function.parameters.type"),
        ([], "tools.0.function.parameters"),
    ],
)
@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "lookup"}}, "auto"])
def test_malformed_tool_schemas_name_their_path(parameters, param: str, choice) -> None:
    with pytest.raises((InvalidToolSchema, InvalidFieldType)) as error:
        parse_chat_request({"messages": USER, "tools": [_tool(parameters)], "tool_choice": choice})
    assert error.value.param == param


@pytest.mark.parametrize("arguments", ["[1, 2]", "5", '"x"', [1], 5])
def test_tool_call_arguments_must_be_an_object(arguments) -> None:
    history = [*USER, {"role": "assistant", "content": None,
                       "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]}]  # fmt: skip
    with pytest.raises(InvalidFieldType) as error:
        parse_chat_request({"messages": history})
    assert error.value.param == "messages.1.tool_calls.0.function.arguments"
    assert "JSON object" in str(error.value)


def test_prompt_ids_past_the_vocabulary_name_the_position() -> None:
    from helios.frontend.openai_request import parse_completion_request

    bootstrap = tinyfront.make_bootstrap()
    preparer = Preparer(bootstrap, served_id="m", context_tokens=64)
    with pytest.raises(InvalidFieldValue) as error:
        preparer.prepare_completion(parse_completion_request({"prompt": [1, bootstrap.vocab_size]}), "r")
    assert error.value.param == "prompt.1"


def _parse(text: str, tools) -> object:
    pipeline = OutputPipeline(tinyfront.frontend_contract(), tools=tools)
    from helios.frontend.pipeline import OutputAccumulator

    accumulator = OutputAccumulator()
    accumulator.add(pipeline.feed([Piece(text)]))
    accumulator.add(pipeline.finish())
    return accumulator.result()


def test_a_call_of_a_function_the_request_never_offered_is_content() -> None:
    offered = {"type": "function", "function": {"name": "weather_lookup",
                                                "parameters": {"properties": {"location": {"type": "string"}}}}}  # fmt: skip
    call = "<tool_call>\n<function=get_weather>\n<parameter=city>\nLisbon\n</parameter>\n</function>\n</tool_call>"
    result = _parse(call, [offered])
    assert result.tool_calls == () and result.content == call
    good = call.replace("get_weather", "weather_lookup").replace("city", "location")
    result = _parse(good, [offered])
    assert [(c.name, json.loads(c.arguments)) for c in result.tool_calls] == [("weather_lookup", {"location": "Lisbon"})]
