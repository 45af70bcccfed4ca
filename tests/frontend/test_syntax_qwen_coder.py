"""Qwen Coder function tags (TOOL_PARSER_QWEN_CODER) with think reasoning, a layout of the shared tag
engine: the format's cases, the rule that sets it apart (a missing `</parameter>` is implied by the
next tag: `implied_value_close`, layout data), a missing `</function>`, and streamed equal to
one-shot under random splittings, with the opener spelled as text or generated as its token."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helios.frontend.detokenize import Piece
from helios.frontend.syntaxes import dsml, frontend_for, glm, qwen_coder, recipient, xtml
from helios.frontend.syntaxes.tagged import TaggedToolParser
from helios.frontend.tool_calls import ToolCallArguments, ToolCallStart
from tests.frontend.syntax_harness import (
    TOOLS,
    TYPED_ARGUMENTS,
    assert_streaming_equal,
    check,
    check_whole_and_per_character,
    run,
    splittings,
    text_pieces,
    value_text,
)

FRONTEND = frontend_for("qwen-coder", "think")
OPEN = "<tool_call>"


def invoke(name: str, arguments: dict, *, parameter_close: bool = True, function_close: bool = True) -> str:
    """One function as the public template writes it (strings bare, other types JSON), its close
    tags optional."""
    text = f"<function={name}>\n"
    for key, value in arguments.items():
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text += f"<parameter={key}>\n{rendered}\n" + ("</parameter>\n" if parameter_close else "")
    return text + ("</function>\n" if function_close else "")


def block(*invokes: str) -> str:
    return OPEN + "\n" + "".join(invokes) + "</tool_call>"


PARIS_3 = ("get_weather", {"city": "Paris", "days": 3})
WEATHER = block(invoke(*PARIS_3))

CASES = {
    "plain call": (WEATHER, None, None, [PARIS_3]),
    "reasoning, content, call": ("<think>\nplan\n</think>\n\nSure.\n" + WEATHER, "plan", "Sure.\n", [PARIS_3]),
    "parallel calls in one block": (block(invoke(*PARIS_3), invoke("get_time", {})), None, None,
                                    [PARIS_3, ("get_time", {})]),
    "every JSON type": (block(invoke("get_weather", TYPED_ARGUMENTS)), None, None, [("get_weather", TYPED_ARGUMENTS)]),
    "missing </function>": (block(invoke(*PARIS_3, function_close=False)), None, None, [PARIS_3]),
    "missing </parameter>": (block(invoke(*PARIS_3, parameter_close=False)), None, None, [PARIS_3]),
    "missing </parameter> and </function>": (
        block(invoke(*PARIS_3, parameter_close=False, function_close=False)), None, None, [PARIS_3],
    ),
    "missing </parameter> before </function>, then another function": (
        block(invoke(*PARIS_3, parameter_close=False), invoke("get_time", {})), None, None,
        [PARIS_3, ("get_time", {})],
    ),
    "tags that end no value are value text": (
        block(invoke("get_weather", {"city": "a <tool_call> <function=x> </parameter b"})), None, None,
        [("get_weather", {"city": "a <tool_call> <function=x> </parameter b"})],
    ),
    "truncated value": (OPEN + "\n<function=get_weather>\n<parameter=city>\nPa", None, None,
                        [("get_weather", {"city": "Pa"})]),
    "truncated name is content": ("x " + OPEN + "\n<function=get_wea", None, "x " + OPEN + "\n<function=get_wea", []),
    "a block naming no call is content": ("x <tool_call>\nno</tool_call> y", None, "x <tool_call>\nno</tool_call> y", []),
    "a block naming no call leaves the next block a block": (
        "<tool_call>\n<function=a b>\n</tool_call>" + block(invoke("get_time", {})), None,
        "<tool_call>\n<function=a b>\n</tool_call>", [("get_time", {})],
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_format_cases(name: str) -> None:
    text, reasoning, content, calls = CASES[name]
    check_whole_and_per_character(FRONTEND, text, reasoning, content, calls)


def test_token_only_opener() -> None:
    token_only = frozenset({"<think>", "</think>", OPEN})
    text = "<think>\nplan\n</think>\n\n" + block(invoke(*PARIS_3, parameter_close=False, function_close=False))
    check(run(FRONTEND, text_pieces(text, sorted(token_only)), token_only=token_only)[0], "plan", None, [PARIS_3])


def arguments(layout, text: str) -> list[tuple[str, dict]]:
    parser = TaggedToolParser(layout, tools=TOOLS)
    events = parser.feed(Piece(text)) + parser.finish()
    names = [e.name for e in events if isinstance(e, ToolCallStart)]
    fragments = {i: "".join(e.fragment for e in events if isinstance(e, ToolCallArguments) and e.index == i)
                 for i in range(len(names))}  # fmt: skip
    return [(name, json.loads(fragments[i])) for i, name in enumerate(names)]


def test_the_implied_close_is_layout_data() -> None:
    layout = qwen_coder.qwen_coder_layout(qwen_coder.PUBLIC_SYNTAX)
    assert layout.implied_value_close
    others = [glm.glm_layout(glm.PUBLIC_SYNTAX), dsml.dsml_layout(dsml.PUBLIC_SYNTAX),
              xtml.xtml_layout(xtml.PUBLIC_SYNTAX), recipient.atem_layout(recipient.PUBLIC_SYNTAX)]  # fmt: skip
    assert not any(other.implied_value_close for other in others)
    text = block(invoke(*PARIS_3, parameter_close=False))
    assert arguments(layout, text) == [PARIS_3]
    # the same tags read without the option: a value ends only at its own close tag
    strict = dataclasses.replace(layout, implied_value_close=False)
    assert arguments(strict, text) == [("get_weather", {"city": "Paris\n<parameter=days>\n3\n</function>\n</tool_call>"})]


# -- streaming equals one-shot --------------------------------------------------------------------

ARGUMENT = st.tuples(st.sampled_from(["city", "days", "tags", "other"]), value_text())
SNIPPETS = st.sampled_from(["", "\n", " ", "<parameter=", "</function>", "<tool_call>", "<think>", "x"])


@st.composite
def qwen_coder_outputs(draw) -> str:
    text = draw(st.sampled_from(["", "<think>\nplan\n</think>\n\n", "<think>\nhm\n"])) + draw(value_text())
    for _ in range(draw(st.integers(0, 3))):
        text += OPEN + draw(st.sampled_from(["\n", ""]))
        for _ in range(draw(st.integers(0, 2))):
            name = draw(st.sampled_from(["get_weather", "get_time", "a b"]))
            text += invoke(name, dict(draw(st.lists(ARGUMENT, max_size=3))),
                           parameter_close=draw(st.booleans()), function_close=draw(st.booleans()))  # fmt: skip
            text += draw(SNIPPETS)
        text += draw(st.sampled_from(["</tool_call>", "</tool_call>\n", ""])) + draw(SNIPPETS)
    return text


@settings(max_examples=150, deadline=None)
@given(data=st.data(), token_only=st.booleans())
def test_streamed_equals_one_shot(data, token_only: bool) -> None:
    text = data.draw(qwen_coder_outputs())
    markers = frozenset({"<think>", "</think>", OPEN}) if token_only else frozenset()
    pieces = text_pieces(text, sorted(markers))
    split = data.draw(splittings(pieces))
    assert_streaming_equal(FRONTEND, pieces, split, token_only=markers)
    assert_streaming_equal(FRONTEND, pieces, split, token_only=markers, reasoning_open=True)
