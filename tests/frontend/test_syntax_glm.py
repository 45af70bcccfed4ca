"""GLM argument tags (TOOL_PARSER_GLM) with think reasoning: the public format's cases, the
newline-free variant, token-only opener, and streamed equal to one-shot under random splittings."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helios.frontend.detokenize import Piece
from helios.frontend.syntaxes import frontend_for, glm
from helios.proto import contract_pb2
from tests.frontend.syntax_harness import (
    TYPED_ARGUMENTS,
    assert_streaming_equal,
    check,
    check_whole_and_per_character,
    run,
    splittings,
    text_pieces,
    value_text,
)

FRONTEND = frontend_for("glm", "think")
NEWLINE_FREE = frontend_for("glm", "think")
NEWLINE_FREE.tool_syntax.CopyFrom(glm.NEWLINE_FREE_SYNTAX)


def call(name: str, arguments: dict, *, newline: bool = True) -> str:
    """A call as the public chat template writes it: strings bare, everything else JSON."""
    sep = "\n" if newline else ""
    text = f"<tool_call>{name}{sep}"
    for key, value in arguments.items():
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text += f"<arg_key>{key}</arg_key>{sep}<arg_value>{rendered}</arg_value>{sep}"
    return text + "</tool_call>"


WEATHER = call("get_weather", {"city": "Paris"})

CASES = {
    "plain call": (WEATHER, None, None, [("get_weather", {"city": "Paris"})]),
    "reasoning, content, call": (
        "<think>\nI should call.\n</think>\n\nSure.\n" + WEATHER,
        "I should call.", "Sure.\n", [("get_weather", {"city": "Paris"})],
    ),
    "parallel calls": (
        WEATHER + "\n" + call("get_weather", {"city": "Rome", "days": 2}),
        None, None, [("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Rome", "days": 2})],
    ),
    "every JSON type": (call("get_weather", TYPED_ARGUMENTS), None, None, [("get_weather", TYPED_ARGUMENTS)]),
    "zero arguments": (call("get_time", {}), None, None, [("get_time", {})]),
    "zero arguments, no newline": ("<tool_call>get_time</tool_call>", None, None, [("get_time", {})]),
    "literal tags inside values": (
        call("get_weather", {"city": "a <tool_call>b</tool_call> <arg_key>c</arg_key><arg_value>"}),
        None, None, [("get_weather", {"city": "a <tool_call>b</tool_call> <arg_key>c</arg_key><arg_value>"})],
    ),
    "content after calls": (WEATHER + "\n\nDone.", None, "Done.", [("get_weather", {"city": "Paris"})]),
    "truncated value": (
        "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Pa", None, None,
        [("get_weather", {"city": "Pa"})],
    ),
    "truncated typed value dropped to what parses": (
        "<tool_call>get_weather\n<arg_key>days</arg_key>\n<arg_value>1", None, None,
        [("get_weather", {"days": 1})],
    ),
    "truncated name is content": ("Hi <tool_call>get_wea", None, "Hi <tool_call>get_wea", []),
    "truncated reasoning": ("<think>\nhalf a thou", "half a thou", None, []),
    "unterminated reasoning ends at the tool opener": (
        "<think>\nhm\n" + WEATHER, "hm", None, [("get_weather", {"city": "Paris"})],
    ),
    "a block naming no call is content": ("x <tool_call></tool_call> y", None, "x <tool_call></tool_call> y", []),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_public_format_cases(name: str) -> None:
    text, reasoning, content, calls = CASES[name]
    check_whole_and_per_character(FRONTEND, text, reasoning, content, calls)


def test_newline_free_variant() -> None:
    text = "<think>ok</think>" + call("get_weather", TYPED_ARGUMENTS, newline=False) + call("get_time", {}, newline=False)
    check(run(NEWLINE_FREE, [Piece(text)])[0], "ok", None, [("get_weather", TYPED_ARGUMENTS), ("get_time", {})])
    # the public form's parser reads the newline-free spelling as well
    check(run(FRONTEND, [Piece(text)])[0], "ok", None, [("get_weather", TYPED_ARGUMENTS), ("get_time", {})])


def test_markers_split_across_deltas() -> None:
    pieces = [Piece("<thi"), Piece("nk>\nr\n</th"), Piece("ink>\n\nok <tool_"), Piece("call>get_weather\n<arg_"),
              Piece("key>city</arg_k"), Piece("ey>\n<arg_value>Pa"), Piece("ris</arg_val"), Piece("ue>\n</tool_ca"),
              Piece("ll>")]  # fmt: skip
    check(run(FRONTEND, pieces)[0], "r", "ok ", [("get_weather", {"city": "Paris"})])


def test_token_only_opener_counts_only_as_its_token() -> None:
    token_only = frozenset({"<think>", "</think>", "<tool_call>"})
    spelled = run(FRONTEND, [Piece("x " + WEATHER)], token_only=token_only)[0]
    check(spelled, None, "x " + WEATHER, [])
    pieces = text_pieces("x " + WEATHER, ["<tool_call>"])
    check(run(FRONTEND, pieces, token_only=token_only)[0], None, "x ", [("get_weather", {"city": "Paris"})])


def test_streamed_deltas_send_id_and_name_once() -> None:
    _, deltas = run(FRONTEND, [Piece(c) for c in WEATHER])
    calls = [c for d in deltas for c in d.tool_calls]
    assert [c.name for c in calls if c.name] == ["get_weather"] and [c.id for c in calls if c.id] == ["call_0"]
    assert len(calls) > 3  # the string value streamed in fragments


def test_string_schema_keeps_json_looking_text() -> None:
    check(run(FRONTEND, [Piece(call("get_weather", {"city": "123"}))])[0], None, None,
          [("get_weather", {"city": "123"})])  # fmt: skip
    check(run(FRONTEND, [Piece(call("unknown", {"n": "5"}))], tools=None)[0], None, None, [("unknown", {"n": "5"})])


def test_public_syntax_data() -> None:
    assert FRONTEND.tool_parser == contract_pb2.TOOL_PARSER_GLM
    assert FRONTEND.reasoning_syntax.terminal_marker == "<tool_call>"


# -- streaming equals one-shot --------------------------------------------------------------------

ARGUMENT = st.tuples(st.sampled_from(["city", "days", "metric", "tags", "other"]), value_text())


@st.composite
def glm_outputs(draw) -> str:
    text = ""
    if draw(st.booleans()):
        text += "<think>\n" + draw(value_text()) + ("\n</think>\n\n" if draw(st.booleans()) else "")
    text += draw(value_text())
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.sampled_from(["get_weather", "get_time", "bad name"]))
        text += f"<tool_call>{name}\n"
        for key, value in draw(st.lists(ARGUMENT, max_size=3)):
            text += f"<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n"
        text += draw(st.sampled_from(["</tool_call>", "</tool_call>\n", ""])) + draw(value_text())
    return text


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_streamed_equals_one_shot(data) -> None:
    text = data.draw(glm_outputs())
    pieces = [Piece(text)] if text else []
    assert_streaming_equal(FRONTEND, pieces, data.draw(splittings(pieces)))
    assert_streaming_equal(NEWLINE_FREE, pieces, data.draw(splittings(pieces)))


def test_overlong_parameter_names_are_dropped_however_split() -> None:
    text = ("<tool_call>get_weather\n<arg_key>" + "k" * 300 + "</arg_key>\n<arg_value>x</arg_value>\n"
            "<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>")  # fmt: skip
    for pieces in ([Piece(text)], [Piece(c) for c in text]):
        check(run(FRONTEND, pieces)[0], None, None, [("get_weather", {"city": "Oslo"})])
