"""XTML tools (TOOL_PARSER_XTML) with XTML think reasoning (REASONING_PARSER_XTML_THINK): the cases
of the format in docs/syntaxes.md, interleaved reasoning after tool blocks, think tags inside values,
token-only delimiters, and streamed equal to one-shot."""

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

FRONTEND = frontend_for("xtml", "xtml")
OPEN, CLOSE = "<xtml:tool_calls>", "</xtml:tool_calls>"


def invoke(name: str, arguments: dict) -> str:
    text = f'<xtml:invoke name="{name}">\n'
    for key, value in arguments.items():
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text += f'<xtml:parameter name="{key}">{rendered}</xtml:parameter>\n'
    return text + "</xtml:invoke>\n"


def block(*invokes: str) -> str:
    return OPEN + "\n" + "".join(invokes) + CLOSE


WEATHER = block(invoke("get_weather", {"city": "Paris"}))
PARIS = ("get_weather", {"city": "Paris"})

CASES = {
    "plain call": (WEATHER, None, None, [PARIS]),
    "reasoning, content, call": ("<xtml:think>plan</xtml:think>Sure. " + WEATHER, "plan", "Sure. ", [PARIS]),
    "parallel calls": (block(invoke("get_weather", {"city": "Paris"}), invoke("get_time", {})), None, None,
                       [PARIS, ("get_time", {})]),
    "every JSON type": (block(invoke("get_weather", TYPED_ARGUMENTS)), None, None, [("get_weather", TYPED_ARGUMENTS)]),
    "zero arguments": (block(invoke("get_time", {})), None, None, [("get_time", {})]),
    "literal tags inside values": (
        block(invoke("get_weather", {"city": "<xtml:think>no</xtml:think> " + CLOSE + ' <xtml:invoke name="x">'})),
        None, None, [("get_weather", {"city": "<xtml:think>no</xtml:think> " + CLOSE + ' <xtml:invoke name="x">'})],
    ),
    "interleaved reasoning after a tool block": (
        "<xtml:think>first</xtml:think>" + WEATHER + "\n<xtml:think>second</xtml:think>Done.",
        "firstsecond", "Done.", [PARIS],
    ),
    "think tags later in content stay content": (
        "Answer <xtml:think>x</xtml:think> y", None, "Answer <xtml:think>x y", [],
    ),
    "unterminated reasoning ends at the tool opener": ("<xtml:think>hm " + WEATHER, "hm ", None, [PARIS]),
    "truncated value": (OPEN + '\n<xtml:invoke name="get_weather">\n<xtml:parameter name="city">Ro', None, None,
                        [("get_weather", {"city": "Ro"})]),
    "truncated reasoning": ("<xtml:think>half", "half", None, []),
    "truncated name is content": ("x " + OPEN + '<xtml:invoke name="get', None,
                                  "x " + OPEN + '<xtml:invoke name="get', []),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_format_cases(name: str) -> None:
    text, reasoning, content, calls = CASES[name]
    check_whole_and_per_character(FRONTEND, text, reasoning, content, calls)


def test_reasoning_open_from_the_prompt() -> None:
    check(run(FRONTEND, [Piece("plan</xtml:think>ok")], reasoning_open=True)[0], "plan", "ok", [])


def test_markers_split_across_deltas() -> None:
    pieces = [Piece("<xtml:th"), Piece("ink>r</xtml:thi"), Piece("nk>ok <xtml:tool_"), Piece("calls>\n<xtml:invoke na"),
              Piece('me="get_weather">\n<xtml:parameter name="city">Par'), Piece("is</xtml:param"),
              Piece("eter>\n</xtml:invoke>\n</xtml:tool_ca"), Piece("lls><xtml:thi"), Piece("nk>more</xtml:think>")]  # fmt: skip
    check(run(FRONTEND, pieces)[0], "rmore", "ok ", [PARIS])


def test_token_only_delimiters() -> None:
    token_only = frozenset({"<xtml:think>", "</xtml:think>", OPEN, CLOSE})
    text = "<xtml:think>a</xtml:think>" + WEATHER + "<xtml:think>b</xtml:think>c"
    check(run(FRONTEND, text_pieces(text, sorted(token_only)), token_only=token_only)[0], "ab", "c", [PARIS])
    check(run(FRONTEND, [Piece(text)], token_only=token_only)[0], None, text, [])  # spelled as text: text


def test_public_syntax_data() -> None:
    assert FRONTEND.tool_parser == contract_pb2.TOOL_PARSER_XTML
    assert FRONTEND.reasoning_parser == contract_pb2.REASONING_PARSER_XTML_THINK
    assert FRONTEND.reasoning_syntax.terminal_marker == OPEN


# -- streaming equals one-shot --------------------------------------------------------------------

ARGUMENT = st.tuples(st.sampled_from(["city", "days", "tags"]), value_text())
SNIPPETS = st.sampled_from(["", "<xtml:think>", "</xtml:think>", "<xtml:th", "\n", " "])


@st.composite
def xtml_outputs(draw) -> str:
    text = ""
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.booleans()):
            text += "<xtml:think>" + draw(value_text()) + draw(SNIPPETS) + draw(st.sampled_from(["</xtml:think>", ""]))
        text += draw(value_text()) + draw(SNIPPETS)
        if draw(st.booleans()):
            text += OPEN + "\n"
            for _ in range(draw(st.integers(0, 2))):
                text += f'<xtml:invoke name="{draw(st.sampled_from(["get_weather", "get_time", "a b"]))}">\n'
                for key, value in draw(st.lists(ARGUMENT, max_size=2)):
                    text += f'<xtml:parameter name="{key}">{value}{draw(SNIPPETS)}</xtml:parameter>\n'
                text += draw(st.sampled_from(["</xtml:invoke>\n", ""]))
            text += draw(st.sampled_from([CLOSE, CLOSE + "\n", ""]))
    return text


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_streamed_equals_one_shot(data) -> None:
    text = data.draw(xtml_outputs())
    pieces = [Piece(text)] if text else []
    assert_streaming_equal(FRONTEND, pieces, data.draw(splittings(pieces)))
    assert_streaming_equal(FRONTEND, pieces, data.draw(splittings(pieces)), reasoning_open=True)
