"""Recipient-header frames with ATEM blocks (REASONING_PARSER_RECIPIENT_HEADER + TOOL_PARSER_ATEM):
self / commentary / user / tool recipients, one invocation a frame, named recipients, eom, token-only
header controls, the prompt's open header or body, and streamed equal to one-shot."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helios.frontend.detokenize import Piece
from helios.frontend.syntaxes import frontend_for
from helios.frontend.syntaxes.recipient import BETWEEN, BODY, HEADER, FrameState, initial_frame_state
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

FRONTEND = frontend_for("atem", "recipient")
CONTROLS = ("<|start|>", "<|message|>", "<|eom|>")
TOKEN_ONLY = frozenset(CONTROLS)


def frame(recipient: str, body: str, end: str = "<|eom|>") -> str:
    return f"<|start|>assistant to={recipient}<|message|>{body}{end}"


def atem(name: str, arguments: dict) -> str:
    text = f'<atem:function_calls>\n<atem:invoke name="{name}">\n'
    for key, value in arguments.items():
        rendered = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text += f'<atem:parameter name="{key}">{rendered}</atem:parameter>\n'
    return text + "</atem:invoke>\n</atem:function_calls>"


WEATHER = atem("get_weather", {"city": "Paris"})
PARIS = ("get_weather", {"city": "Paris"})

CASES = {
    "reasoning then answer": (frame("self", "plan") + frame("user", "Hello.", ""), "plan", "Hello.", []),
    "commentary is visible": (frame("commentary", "Checking. ") + frame("user", "Done", ""), None,
                              "Checking. Done", []),
    "generic tool recipient": (frame("self", "need weather") + frame("functions", WEATHER), "need weather", None,
                               [PARIS]),
    "named tool recipient": (frame("functions.get_weather", WEATHER), None, None, [PARIS]),
    "named recipient must match the invocation": (frame("functions.get_time", WEATHER), None, WEATHER, []),
    "named recipient must be registered": (frame("functions.rm_rf", atem("rm_rf", {})), None, atem("rm_rf", {}), []),
    "unregistered invocation is content": (frame("functions", atem("rm_rf", {})), None, atem("rm_rf", {}), []),
    "parallel calls in consecutive frames": (
        frame("functions", WEATHER) + frame("functions", atem("get_time", {})), None, None,
        [PARIS, ("get_time", {})],
    ),
    "one invocation a frame: a second one is dropped": (
        frame("functions", WEATHER.replace("</atem:function_calls>", '<atem:invoke name="get_time">\n</atem:invoke>\n'
                                           "</atem:function_calls>")),
        None, None, [PARIS],
    ),
    "every JSON type": (frame("functions", atem("get_weather", TYPED_ARGUMENTS)), None, None,
                        [("get_weather", TYPED_ARGUMENTS)]),
    "zero arguments": (frame("functions.get_time", atem("get_time", {})), None, None, [("get_time", {})]),
    "literal tags inside values": (
        frame("functions", atem("get_weather", {"city": "<atem:function_calls> <atem:invoke name=\"x\"> <think>"})),
        None, None, [("get_weather", {"city": "<atem:function_calls> <atem:invoke name=\"x\"> <think>"})],
    ),
    "calls after content": (frame("commentary", "Let me check.") + frame("functions", WEATHER), None,
                            "Let me check.", [PARIS]),
    "content after a call": (frame("functions", WEATHER) + frame("user", "It is sunny.", ""), None,
                             "It is sunny.", [PARIS]),
    "a new header ends an unterminated body": ("<|start|>assistant to=self<|message|>a" + frame("user", "b", ""),
                                               "a", "b", []),
    "truncated value": (frame("functions", WEATHER[: WEATHER.index("Paris") + 2], ""), None, None,
                        [("get_weather", {"city": "Pa"})]),
    "truncated header": ("<|start|>assistant to=se", None, None, []),
    "unknown recipient is content": (frame("browser", "x"), None, "x", []),
    "tool syntax in a content frame is content": (frame("user", WEATHER, ""), None, WEATHER, []),
    "text outside frames is content": (" hi " + frame("self", "r"), "r", "hi", []),
}  # fmt: skip


@pytest.mark.parametrize("name", CASES)
def test_frame_cases(name: str) -> None:
    text, reasoning, content, calls = CASES[name]
    check(run(FRONTEND, text_pieces(text, CONTROLS), token_only=TOKEN_ONLY)[0], reasoning, content, calls)
    check_whole_and_per_character(FRONTEND, text, reasoning, content, calls)  # controls matched as text


def test_header_controls_count_only_as_tokens() -> None:
    body = "a <|eom|> b <|start|>assistant to=functions<|message|>c"
    pieces = text_pieces("<|start|>assistant to=self<|message|>", CONTROLS) + [Piece(body)]
    check(run(FRONTEND, pieces, token_only=TOKEN_ONLY)[0], body, None, [])


def test_prompt_open_header_accepts_the_recipient_suffix() -> None:
    prompt = "<|start|>user<|message|>hi<|end|><|start|>assistant"
    state = initial_frame_state(prompt, FRONTEND)
    assert state == FrameState(HEADER, "assistant")
    text = " to=self<|message|>plan<|eom|><|start|>assistant to=user<|message|>ok"
    check(run(FRONTEND, text_pieces(text, CONTROLS), token_only=TOKEN_ONLY, frame=state)[0], "plan", "ok", [])


def test_prompt_open_body_continues_it() -> None:
    prompt = "<|start|>assistant to=functions.get_weather<|message|>"
    state = initial_frame_state(prompt, FRONTEND)
    assert state == FrameState(BODY, "assistant to=functions.get_weather")
    check(run(FRONTEND, text_pieces(WEATHER + "<|eom|>", CONTROLS), token_only=TOKEN_ONLY, frame=state)[0],
          None, None, [PARIS])  # fmt: skip
    assert initial_frame_state(prompt + "x<|eom|>", FRONTEND) == FrameState(BETWEEN)
    assert initial_frame_state("no frames", FRONTEND) == FrameState(BETWEEN)


def test_markers_split_across_deltas() -> None:
    text = frame("self", "plan") + frame("functions", WEATHER)
    cuts = list(range(3, len(text), 7))
    pieces = [Piece(text[a:b]) for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    check(run(FRONTEND, pieces)[0], "plan", None, [PARIS])


def test_tools_off_keeps_tool_frames_as_content() -> None:
    check(run(FRONTEND, text_pieces(frame("functions", WEATHER), CONTROLS), token_only=TOKEN_ONLY,
              parse_tools=False)[0], None, WEATHER, [])  # fmt: skip


# -- streaming equals one-shot --------------------------------------------------------------------

RECIPIENTS = st.sampled_from(["self", "user", "commentary", "functions", "functions.get_weather",
                              "functions.get_time", "other", ""])  # fmt: skip
ARGUMENT = st.tuples(st.sampled_from(["city", "days", "tags"]), value_text())


@st.composite
def frame_outputs(draw) -> str:
    text = draw(st.sampled_from(["", " ", "x"]))
    for _ in range(draw(st.integers(1, 3))):
        recipient = draw(RECIPIENTS)
        text += "<|start|>assistant" + (f" to={recipient}" if recipient else "") + "<|message|>"
        if draw(st.booleans()):
            text += f'<atem:function_calls>\n<atem:invoke name="{draw(st.sampled_from(["get_weather", "get_time"]))}">\n'
            for key, value in draw(st.lists(ARGUMENT, max_size=2)):
                text += f'<atem:parameter name="{key}">{value}</atem:parameter>\n'
            text += draw(st.sampled_from(["</atem:invoke>\n</atem:function_calls>", "</atem:invoke>", ""]))
        text += draw(value_text()) + draw(st.sampled_from(["<|eom|>", "", "<|eom|>\n"]))
    return text


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_streamed_equals_one_shot(data) -> None:
    text = data.draw(frame_outputs())
    pieces = [Piece(text)] if text else []
    assert_streaming_equal(FRONTEND, pieces, data.draw(splittings(pieces)))
    marked = text_pieces(text, CONTROLS)
    assert_streaming_equal(FRONTEND, marked, data.draw(splittings(marked)), token_only=TOKEN_ONLY)
