"""DSML (TOOL_PARSER_DSML) with think reasoning: the public format's cases (several invocations a
block, the string flag typing values), token-only opener, and streamed equal to one-shot."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helios.frontend.detokenize import Piece
from helios.frontend.syntaxes import frontend_for
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

FRONTEND = frontend_for("dsml", "think")
B = "\uff5c"
OPEN, CLOSE = f"<{B}DSML{B}function_calls>", f"</{B}DSML{B}function_calls>"


def invoke(name: str, arguments: dict) -> str:
    """An invocation as the public template writes it: string="true" for strings, else JSON."""
    text = f'<{B}DSML{B}invoke name="{name}">\n'
    for key, value in arguments.items():
        flag = "true" if isinstance(value, str) else "false"
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text += f'<{B}DSML{B}parameter name="{key}" string="{flag}">{rendered}</{B}DSML{B}parameter>\n'
    return text + f"</{B}DSML{B}invoke>\n"


def block(*invokes: str) -> str:
    return OPEN + "\n" + "".join(invokes) + CLOSE


WEATHER = block(invoke("get_weather", {"city": "Paris"}))

CASES = {
    "plain call": (WEATHER, None, None, [("get_weather", {"city": "Paris"})]),
    "reasoning, content, call": (
        "<think>\nplan\n</think>\n\nSure.\n\n" + WEATHER, "plan", "Sure.\n\n", [("get_weather", {"city": "Paris"})],
    ),
    "parallel calls in one block": (
        block(invoke("get_weather", {"city": "Paris"}), invoke("get_time", {})),
        None, None, [("get_weather", {"city": "Paris"}), ("get_time", {})],
    ),
    "every JSON type, typed by the flag": (
        block(invoke("get_weather", TYPED_ARGUMENTS)), None, None, [("get_weather", TYPED_ARGUMENTS)],
    ),
    "the flag wins over the schema": (
        block(f'<{B}DSML{B}invoke name="get_weather">\n<{B}DSML{B}parameter name="city" string="false">7'
              f'</{B}DSML{B}parameter>\n<{B}DSML{B}parameter name="days" string="true">3</{B}DSML{B}parameter>\n'
              f'</{B}DSML{B}invoke>\n'),
        None, None, [("get_weather", {"city": 7, "days": "3"})],
    ),
    "flagged JSON that does not parse stays a string": (
        block(f'<{B}DSML{B}invoke name="f">\n<{B}DSML{B}parameter name="a" string="false">{{oops'
              f'</{B}DSML{B}parameter>\n</{B}DSML{B}invoke>\n'),
        None, None, [("f", {"a": "{oops"})],
    ),
    "zero arguments": (block(invoke("get_time", {})), None, None, [("get_time", {})]),
    "literal tags inside values": (
        block(invoke("get_weather", {"city": f"{OPEN} <{B}DSML{B}invoke name=\"x\"> </{B}DSML{B}invoke> {CLOSE}"})),
        None, None,
        [("get_weather", {"city": f"{OPEN} <{B}DSML{B}invoke name=\"x\"> </{B}DSML{B}invoke> {CLOSE}"})],
    ),
    "content after the block": (WEATHER + "\nDone.", None, "Done.", [("get_weather", {"city": "Paris"})]),
    "truncated value": (
        OPEN + f'\n<{B}DSML{B}invoke name="get_weather">\n<{B}DSML{B}parameter name="city" string="true">Par',
        None, None, [("get_weather", {"city": "Par"})],
    ),
    "truncated before a value: the parameter is dropped": (
        OPEN + f'\n<{B}DSML{B}invoke name="get_weather">\n<{B}DSML{B}parameter name="city" str',
        None, None, [("get_weather", {})],
    ),
    "truncated name is content": ("a " + OPEN + f'\n<{B}DSML{B}invoke name="get_', None,
                                  "a " + OPEN + f'\n<{B}DSML{B}invoke name="get_', []),
    "unterminated reasoning ends at the opener": ("<think>\nhm\n" + WEATHER, "hm", None,
                                                  [("get_weather", {"city": "Paris"})]),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_public_format_cases(name: str) -> None:
    text, reasoning, content, calls = CASES[name]
    check_whole_and_per_character(FRONTEND, text, reasoning, content, calls)


def test_markers_split_across_deltas() -> None:
    text = "<think>r</think>ok " + WEATHER
    cuts = [3, 12, 20, 24, 40, 51, 70, 83, 90, 101, len(text) - 5]
    pieces = [Piece(text[a:b]) for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    check(run(FRONTEND, pieces)[0], "r", "ok ", [("get_weather", {"city": "Paris"})])


def test_token_only_opener() -> None:
    token_only = frozenset({OPEN})
    check(run(FRONTEND, [Piece(WEATHER)], token_only=token_only)[0], None, WEATHER, [])
    check(run(FRONTEND, text_pieces(WEATHER, [OPEN]), token_only=token_only)[0], None, None,
          [("get_weather", {"city": "Paris"})])  # fmt: skip


def test_public_syntax_data() -> None:
    assert FRONTEND.tool_parser == contract_pb2.TOOL_PARSER_DSML
    assert FRONTEND.reasoning_syntax.terminal_marker == OPEN


# -- streaming equals one-shot --------------------------------------------------------------------

ARGUMENT = st.tuples(st.sampled_from(["city", "days", "tags"]), st.sampled_from(["true", "false", "x"]), value_text())


@st.composite
def dsml_outputs(draw) -> str:
    text = ""
    if draw(st.booleans()):
        text += "<think>\n" + draw(value_text()) + ("\n</think>\n\n" if draw(st.booleans()) else "")
    text += draw(value_text())
    for _ in range(draw(st.integers(0, 2))):
        text += OPEN + "\n"
        for _ in range(draw(st.integers(0, 2))):
            name = draw(st.sampled_from(["get_weather", "get_time", "a b"]))
            text += f'<{B}DSML{B}invoke name="{name}">\n'
            for key, flag, value in draw(st.lists(ARGUMENT, max_size=3)):
                text += f'<{B}DSML{B}parameter name="{key}" string="{flag}">{value}</{B}DSML{B}parameter>\n'
            text += draw(st.sampled_from([f"</{B}DSML{B}invoke>\n", ""]))
        text += draw(st.sampled_from([CLOSE, ""])) + draw(value_text())
    return text


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_streamed_equals_one_shot(data) -> None:
    text = data.draw(dsml_outputs())
    pieces = [Piece(text)] if text else []
    assert_streaming_equal(FRONTEND, pieces, data.draw(splittings(pieces)))
