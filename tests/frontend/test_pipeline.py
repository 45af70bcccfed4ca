"""OutputPipeline: think-tag reasoning, Qwen Coder tool calls, token-only delimiters, and the
streamed result equal to the non-streamed one for every splitting."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helios.frontend.detokenize import Piece
from helios.frontend.pipeline import Delta, OutputAccumulator, OutputPipeline, ParsedOutput, parse_text
from helios.frontend.tool_calls import convert_parameter
from tests.frontend import tinyfront

FRONTEND = tinyfront.frontend_contract()
# NOTE: a call may name only one of the request's tools; `noop` and `f` are offered with no schema
TOOLS = [tinyfront.WEATHER_TOOL, *({"type": "function", "function": {"name": n}} for n in ("noop", "f"))]
TOKEN_ONLY = frozenset({"<think>", "</think>", "<tool_call>"})


def counter_ids():
    counter = itertools.count()
    return lambda: f"call_{next(counter)}"


def run(
    pieces: list[Piece], *, token_only=frozenset(), reasoning_open=False, tools=TOOLS, frontend=FRONTEND
) -> tuple:
    pipeline = OutputPipeline(
        frontend, tools=tools, token_only=token_only, reasoning_open=reasoning_open, id_factory=counter_ids()
    )
    accumulator = OutputAccumulator()
    deltas: list[Delta] = []
    for piece in pieces:
        step = pipeline.feed([piece])
        deltas.extend(step)
    deltas.extend(pipeline.finish())
    accumulator.add(deltas)
    return accumulator.result(), deltas


def test_reasoning_content_and_tool_calls() -> None:
    text = (
        "<think>\nI should call.\n</think>\n\nSure.\n<tool_call>\n<function=get_weather>\n"
        '<parameter=city>\nParis "x"\n</parameter>\n<parameter=days>\n3\n</parameter>\n'
        "<parameter=hours>\n[1, 2.5]\n</parameter>\n<parameter=metric>\nTrue\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=noop>\n</function>\n</tool_call>\n"
    )
    result, _ = run([Piece(text)])
    assert result.reasoning == "I should call."
    assert result.content == "Sure.\n"
    assert [(c.id, c.name) for c in result.tool_calls] == [("call_0", "get_weather"), ("call_1", "noop")]
    arguments = json.loads(result.tool_calls[0].arguments)
    assert arguments == {"city": 'Paris "x"', "days": 3, "hours": [1, 2.5], "metric": True}
    assert result.tool_calls[0].arguments == json.dumps(arguments, ensure_ascii=False)
    assert result.tool_calls[1].arguments == "{}"


def test_streamed_tool_call_sends_id_and_name_once() -> None:
    text = (
        "<tool_call>\n<function=get_weather>\n<parameter=city>\nNice\n</parameter>\n</function>\n</tool_call>"
    )
    _, deltas = run([Piece(c) for c in text])
    calls = [call for delta in deltas for call in delta.tool_calls]
    assert [c.name for c in calls if c.name] == ["get_weather"]
    assert [c.id for c in calls if c.id] == ["call_0"]
    assert calls[0].arguments == ""
    assert "".join(c.arguments for c in calls) == '{"city": "Nice"}'
    assert len(calls) > 3  # the string value streamed in fragments


def test_reasoning_open_from_the_prompt_and_second_close_dropped() -> None:
    close = Piece("</think>", marker=True)
    pieces = [Piece("plan\n"), close, Piece("\n\nanswer"), close, Piece(" done")]
    result, _ = run(pieces, reasoning_open=True, token_only=TOKEN_ONLY)
    assert (result.reasoning, result.content) == ("plan", "answer done")


def test_token_only_delimiters_count_only_as_tokens() -> None:
    pieces = [Piece("<think>", marker=True), Piece("a <think> b </think> c"), Piece("</think>", marker=True),
              Piece("ans </think> text")]  # fmt: skip
    result, _ = run(pieces, token_only=TOKEN_ONLY)
    assert result.reasoning == "a <think> b </think> c"  # plain spellings stay reasoning text
    assert result.content == "ans </think> text"  # and answer text
    # spelled as text, the tool opener is not a tool call when it is a one-token delimiter
    result, _ = run([Piece("x <tool_call>\n<function=f>\n</function>\n</tool_call>")], token_only=TOKEN_ONLY)
    assert result.tool_calls == () and result.content.startswith("x <tool_call>")
    # generated as its token, it is
    result, _ = run([Piece("x "), Piece("<tool_call>", marker=True), Piece("\n<function=f>\n</function>\n</tool_call>")],
                    token_only=TOKEN_ONLY)  # fmt: skip
    assert [c.name for c in result.tool_calls] == ["f"] and result.content == "x "


def test_terminal_marker_ends_reasoning() -> None:
    text = "<think>\nhm\n<tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
    result, _ = run([Piece(text)])
    assert result.reasoning == "hm" and result.content is None
    assert [(c.name, c.arguments) for c in result.tool_calls] == [("f", '{"a": "1"}')]


def test_malformed_block_is_content_and_tools_off() -> None:
    assert run([Piece("hi <tool_call>\nnot a call</tool_call> after")])[0].content == (
        "hi <tool_call>\nnot a call</tool_call> after"
    )
    text = "<tool_call>\n<function=f>\n</function>\n</tool_call>"
    pipeline = OutputPipeline(FRONTEND, parse_tools=False)
    assert pipeline.feed([Piece(text)]) + pipeline.finish() == [Delta(content=text)]


def test_unterminated_call_is_closed_at_the_end() -> None:
    result, _ = run([Piece("<tool_call>\n<function=get_weather>\n<parameter=city>\nRo")])
    assert json.loads(result.tool_calls[0].arguments) == {"city": "Ro"}
    result, _ = run([Piece("<tool_call>\n<function=get_wea")])
    assert result.tool_calls == () and result.content == "<tool_call>\n<function=get_wea"


def test_parameter_conversion() -> None:
    assert convert_parameter("3", {"type": "integer"}) == 3
    assert convert_parameter("3.0", {"type": "integer"}) == 3
    assert convert_parameter("x", {"type": "integer"}) == "x"
    assert convert_parameter("2.5", {"type": "number"}) == 2.5
    assert convert_parameter("false", {"type": "boolean"}) is False
    assert convert_parameter('{"a": 1}', {"type": "object"}) == {"a": 1}
    assert convert_parameter("[1]", {"type": ["array", "null"]}) == [1]
    assert convert_parameter("null", {"type": ["integer", "null"]}) is None
    assert convert_parameter(" 7 ", None) == " 7 "  # no schema: a string, as written


def test_parse_text_without_reasoning_parser() -> None:
    frontend = tinyfront.frontend_contract(reasoning=False)
    result = parse_text("<think>x</think>y", frontend)
    assert result == ParsedOutput(reasoning=None, content="<think>x</think>y", tool_calls=())


# -- streaming equals non-streaming -------------------------------------------------------------

VALUE_TEXT = st.text(st.sampled_from(list('ab é"\\\n<>/{}[]0123')), max_size=12)
PARAM = st.tuples(st.sampled_from(["city", "days", "hours", "metric", "other"]), VALUE_TEXT)
CALL = st.tuples(st.sampled_from(["get_weather", "noop"]), st.lists(PARAM, max_size=3), st.booleans())


@st.composite
def outputs(draw) -> list[tuple[str, bool]]:
    """A model output as segments (text, is_delimiter)."""
    segments: list[tuple[str, bool]] = []
    if draw(st.booleans()):
        segments += [("<think>", True), ("\n" + draw(VALUE_TEXT) + "\n", False)]
        if draw(st.booleans()):
            segments += [("</think>", True), ("\n\n", False)]
    segments.append((draw(VALUE_TEXT), False))
    for name, params, well_formed in draw(st.lists(CALL, max_size=2)):
        body = f"\n<function={name}>\n"
        for key, value in params:
            body += f"<parameter={key}>\n{value}\n</parameter>\n"
        body += "</function>\n</tool_call>" if well_formed else ""
        segments += [
            ("<tool_call>", True),
            (body, False),
            (draw(st.sampled_from(["", "\n", " tail"])), False),
        ]
    if draw(st.booleans()):
        segments += [("</think>", True), (draw(VALUE_TEXT), False)]
    return segments


def split_pieces(segments: list[tuple[str, bool]], cuts: list[int], token_only: bool) -> list[Piece]:
    pieces: list[Piece] = []
    for text, delimiter in segments:
        if delimiter and token_only:
            pieces.append(Piece(text, marker=True))
            continue
        position = 0
        for cut in cuts:
            if len(text) - position <= 1:
                break
            size = 1 + cut % (len(text) - position)
            pieces.append(Piece(text[position : position + size]))
            position += size
        if position < len(text):
            pieces.append(Piece(text[position:]))
    return [p for p in pieces if p.text]


def coalesce(segments: list[tuple[str, bool]], token_only: bool) -> list[Piece]:
    pieces: list[Piece] = []
    for text, delimiter in segments:
        if delimiter and token_only:
            pieces.append(Piece(text, marker=True))
        elif text and pieces and not pieces[-1].marker:
            pieces[-1] = Piece(pieces[-1].text + text)
        elif text:
            pieces.append(Piece(text))
    return pieces


FRONTENDS = {
    "think+qwen-coder": FRONTEND,
    "think-only": tinyfront.frontend_contract(tools=False),
    "tools-only": tinyfront.frontend_contract(reasoning=False),
}


@pytest.mark.parametrize("name", list(FRONTENDS))
@settings(max_examples=150, deadline=None)
@given(
    segments=outputs(),
    cuts=st.lists(st.integers(0, 50), max_size=80),
    token_only=st.booleans(),
    reasoning_open=st.booleans(),
)
def test_streamed_equals_non_streamed(name, segments, cuts, token_only, reasoning_open) -> None:
    frontend = FRONTENDS[name]
    delimiters = TOKEN_ONLY if token_only else frozenset()
    options = dict(token_only=delimiters, reasoning_open=reasoning_open, frontend=frontend)
    whole, _ = run(coalesce(segments, token_only), **options)
    streamed, deltas = run(split_pieces(segments, cuts, token_only), **options)
    assert streamed == whole
    for call in whole.tool_calls:
        assert isinstance(json.loads(call.arguments), dict)
    # the id and name of each call are sent once
    named = [c.index for d in deltas for c in d.tool_calls if c.name is not None]
    assert named == sorted(set(named))
