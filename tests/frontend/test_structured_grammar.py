"""Structured-output grammars for every frontend syntax, through llguidance on the host: valid
outputs pass token by token and parse, forbidden ones are masked, reasoning stays free, literal
delimiters inside the answer stay answer text, and random walks under the masks always end in an
answer that validates."""

from __future__ import annotations

import json

import numpy as np
import pytest

from helios.frontend.detokenize import IncrementalDetokenizer, Piece
from helios.frontend.errors import InvalidFieldValue
from helios.frontend.structured import (
    JSON_OBJECT,
    JSON_SCHEMA,
    TOOL_NAMED,
    TOOL_REQUIRED,
    GrammarCompiler,
    GrammarUnavailable,
    GrammarViolation,
    StructuredOutput,
    added_token_ids,
    build_grammar,
    structured_output_from,
)
from helios.frontend.syntaxes import frontend_for
from helios.frontend.syntaxes.recipient import BODY, HEADER, FrameState
from tests.fixtures.checkpoints import build_tokenizer
from tests.frontend.syntax_harness import run

TOKENIZER = build_tokenizer("qwen3")  # 256 byte tokens + specials, think and tool_call tags among them
ADDED = added_token_ids(TOKENIZER)
EOS = ADDED["<|im_end|>"]
VOCAB = 288  # the model's sampled range, past the tokenizer's ids
COMPILER = GrammarCompiler(TOKENIZER.to_str(), eos_ids=[EOS], vocab_size=VOCAB, mask_words=(VOCAB + 31) // 32)
TOKEN_ONLY = frozenset(t for t in ("<think>", "</think>", "<tool_call>") if t in ADDED)

TOOLS = (
    {"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}},
)  # fmt: skip
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9},
                   "tag": {"type": "string", "maxLength": 24}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}  # fmt: skip
ANSWER = StructuredOutput(JSON_SCHEMA, schema=SCHEMA, tools=TOOLS, allow_tools=True)
SYNTAXES = [("qwen-coder", "think"), ("glm", "think"), ("dsml", "think"), ("xtml", "xtml"), ("atem", "recipient")]


def validates(document, schema=SCHEMA) -> bool:
    """The JSON-schema subset these tests use."""
    if not isinstance(document, dict) or not set(schema["required"]) <= set(document):
        return False
    for key, value in document.items():
        spec = schema["properties"].get(key)
        if spec is None:
            return False
        kind = spec["type"]
        if kind == "boolean" and not isinstance(value, bool):
            return False
        if kind == "integer" and (isinstance(value, bool) or not isinstance(value, int)
                                  or not spec.get("minimum", value) <= value <= spec.get("maximum", value)):  # fmt: skip
            return False
        if kind == "string" and (not isinstance(value, str) or len(value) > spec.get("maxLength", len(value))):
            return False
    return True


def tokens(text: str) -> list[int]:
    return list(TOKENIZER.encode(text, add_special_tokens=False).ids)


def state_for(tools: str, reasoning: str, structured=ANSWER, **options):
    frontend = frontend_for(tools, reasoning)
    grammar = build_grammar(frontend, structured, token_id=ADDED.get, eos_ids=[EOS], **options)
    return frontend, COMPILER.state(grammar)


def allowed(state, token: int) -> bool:
    words = state.mask()
    return bool((words[token // 32] >> (token % 32)) & 1)


def spelled(text: str) -> list[int]:
    """`text` spelled byte by byte with ordinary tokens (no added token), as a model writes literal
    delimiters inside an answer."""
    return [t for character in text for t in tokens(character)]


def consume(state, text: str, ids: list[int] | None = None) -> list[int]:
    ids = tokens(text) if ids is None else ids
    for token in ids:
        assert allowed(state, token), (text, TOKENIZER.decode([token], skip_special_tokens=False))
        state.advance(token)
    assert allowed(state, EOS), "the grammar must allow EOS once complete"
    return ids


def parse(frontend, ids: list[int], structured: bool = True):
    """The generated ids through incremental detokenization (one-token delimiters as markers) and
    the OutputPipeline, as serving runs them."""
    markers = {ADDED[t]: t for t in TOKEN_ONLY}
    detokenizer = IncrementalDetokenizer(TOKENIZER, markers)
    pieces = [piece for token in ids for piece in detokenizer.push(token)] + detokenizer.flush()
    return run(frontend, pieces, tools=list(TOOLS), token_only=TOKEN_ONLY, structured=structured)[0]


# one valid output per syntax: reasoning, then the JSON answer, or a call
def call_text(tools: str) -> str:
    b = "\uff5c"
    return {
        "qwen-coder": "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>\n</tool_call>",
        "glm": "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>",
        "dsml": (f'<{b}DSML{b}function_calls>\n<{b}DSML{b}invoke name="get_weather">\n<{b}DSML{b}parameter name="city" '
                 f'string="true">Paris</{b}DSML{b}parameter>\n</{b}DSML{b}invoke>\n</{b}DSML{b}function_calls>'),
        "xtml": ('<xtml:tool_calls>\n<xtml:invoke name="get_weather">\n<xtml:parameter name="city">Paris'
                 "</xtml:parameter>\n</xtml:invoke>\n</xtml:tool_calls>"),
        "atem": ('<atem:function_calls>\n<atem:invoke name="get_weather">\n<atem:parameter name="city">Paris'
                 "</atem:parameter>\n</atem:invoke>\n</atem:function_calls>"),
    }[tools]  # fmt: skip


def thought(reasoning: str, text: str) -> str:
    if reasoning == "think":
        return f"<think>\n{text}\n</think>\n\n"
    if reasoning == "xtml":
        return f"<xtml:think>{text}</xtml:think>"
    return f"<|start|>assistant to=self<|message|>{text}<|eom|>"


def answer_text(reasoning: str, document: str) -> str:
    return f"<|start|>assistant to=user<|message|>{document}" if reasoning == "recipient" else document


def call_output(tools: str, reasoning: str) -> str:
    call = call_text(tools)
    return f"<|start|>assistant to=functions<|message|>{call}<|eom|>" if reasoning == "recipient" else call


@pytest.mark.parametrize("tools, reasoning", SYNTAXES)
def test_reasoning_then_answer_passes_and_parses(tools: str, reasoning: str) -> None:
    document = '{"ok":true,"n":3,"tag":"<tool_call> </think>"}'  # literal delimiters inside the answer
    text = thought(reasoning, 'free {"reasoning": <x>') + answer_text(reasoning, document)
    frontend, state = state_for(tools, reasoning)
    head = text[: len(text) - len(document)]
    ids = consume(state, text, tokens(head) + spelled(document))
    parsed = parse(frontend, ids)
    assert parsed.reasoning == 'free {"reasoning": <x>'
    assert parsed.content == document and parsed.tool_calls == ()
    assert validates(json.loads(parsed.content))


@pytest.mark.parametrize("tools, reasoning", SYNTAXES)
def test_tool_calls_stay_allowed_and_can_be_forced(tools: str, reasoning: str) -> None:
    for structured in (ANSWER, StructuredOutput(TOOL_REQUIRED, tools=TOOLS),
                       StructuredOutput(TOOL_NAMED, tool_name="get_weather", tools=TOOLS)):  # fmt: skip
        frontend, state = state_for(tools, reasoning, structured)
        text = thought(reasoning, "need the weather") + call_output(tools, reasoning)
        parsed = parse(frontend, consume(state, text))
        assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [("get_weather", {"city": "Paris"})]
        assert parsed.reasoning == "need the weather" and parsed.content is None


@pytest.mark.parametrize("tools, reasoning", SYNTAXES)
def test_forbidden_outputs_are_masked(tools: str, reasoning: str) -> None:
    frontend, state = state_for(tools, reasoning, StructuredOutput(TOOL_NAMED, tool_name="get_time", tools=TOOLS))
    text = call_output(tools, reasoning)
    prefix = text[: text.index("get_weather")]
    for token in tokens(prefix):
        state.advance(token)
    assert not allowed(state, tokens("w")[0])  # only get_time may be named
    with pytest.raises(GrammarViolation):
        state.advance(tokens("w")[0])
    _, state = state_for(tools, reasoning)
    for token in tokens(answer_text(reasoning, "")):
        state.advance(token)
    assert not allowed(state, tokens("[")[0]) and allowed(state, tokens("{")[0])  # an object, not an array


def test_reasoning_is_unconstrained() -> None:
    _, state = state_for("qwen-coder", "think", reasoning_open=True)
    words = np.array(state.mask(), dtype=np.int32)
    bits = np.unpackbits(words.view(np.uint8), bitorder="little")[:VOCAB]
    # every id but EOS (an answer must follow) and the tool opener's token (the terminal marker, which
    # ends reasoning into a call) may continue reasoning; the close delimiter ends it
    forbidden = {i for i in range(VOCAB) if not bits[i]}
    assert forbidden == {EOS}
    consume(state, 'any <think> text { "not json\n</think>{"ok":false,"n":0}')


@pytest.mark.parametrize("reasoning", ["none", "think"])
def test_random_walks_under_the_mask_end_in_a_valid_answer(reasoning: str) -> None:
    """Arbitrary tokens, as a random model samples them: uniform over what the mask allows (the
    reasoning close token, when allowed, taken one time in five so that walks end)."""
    rng = np.random.default_rng(7)
    frontend = frontend_for("qwen-coder", reasoning)
    close = ADDED["</think>"]
    for _ in range(25):
        state = COMPILER.state(build_grammar(frontend, StructuredOutput(JSON_SCHEMA, schema=SCHEMA),
                                             token_id=ADDED.get, eos_ids=[EOS]))  # fmt: skip
        out: list[int] = []
        while True:
            words = np.array(state.mask(), dtype=np.int32)
            choices = np.flatnonzero(np.unpackbits(words.view(np.uint8), bitorder="little")[:VOCAB])
            token = close if close in choices and rng.random() < 0.2 else int(rng.choice(choices))
            if token == EOS:
                break
            state.advance(token)
            out.append(token)
            assert len(out) < 400
        parsed = parse(frontend, out)
        assert parsed.tool_calls == () and validates(json.loads(parsed.content)), out


def test_recipient_grammar_accepts_the_open_header_suffix() -> None:
    frontend, state = state_for("atem", "recipient", frame=FrameState(HEADER, "assistant"))
    text = ' to=self<|message|>hm<|eom|><|start|>assistant to=user<|message|>{"ok":true,"n":1}'
    parsed = run(frontend, [Piece(text)], frame=FrameState(HEADER, "assistant"), structured=True)[0]
    consume(state, text)
    assert (parsed.reasoning, json.loads(parsed.content)) == ("hm", {"ok": True, "n": 1})


def test_json_object_and_request_fields() -> None:
    assert structured_output_from({"type": "json_object"}, None, []) == StructuredOutput(JSON_OBJECT)
    assert structured_output_from({"type": "text"}, None, []) is None
    assert structured_output_from(None, "auto", list(TOOLS)) is None
    named = structured_output_from(None, {"type": "function", "function": {"name": "get_time"}}, list(TOOLS))
    assert named.kind == TOOL_NAMED and named.tool_name == "get_time"
    schema = structured_output_from({"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}},
                                    "auto", list(TOOLS))  # fmt: skip
    assert schema.allow_tools and schema.schema == SCHEMA
    for bad, param in [(({"type": "json_schema"}, None, []), "response_format.json_schema.schema"),
                       (({"type": "yaml"}, None, []), "response_format.type"),
                       ((None, "required", []), "tool_choice"),
                       ((None, {"type": "function", "function": {"name": "nope"}}, list(TOOLS)),
                        "tool_choice.function.name")]:  # fmt: skip
        with pytest.raises(InvalidFieldValue) as raised:
            structured_output_from(*bad)
        assert raised.value.param == param
    _, state = state_for("none", "none", StructuredOutput(JSON_OBJECT))
    consume(state, '{"anything":[1,"two",{"three":null}]}')


def test_answer_gate_keeps_unstructured_pipelines_unchanged() -> None:
    frontend = frontend_for("qwen-coder", "think")
    text = 'x <tool_call>\n<function=get_time>\n</function>\n</tool_call>'
    assert [c.name for c in parse(frontend, tokens(text), structured=False).tool_calls] == ["get_time"]
    assert parse(frontend, tokens(text), structured=True).content == text  # not a call: opaque
    assert run(frontend, [Piece("")], structured=True)[0].content is None


def test_recipient_grammar_continues_a_body_the_prompt_opened() -> None:
    frontend = frontend_for("atem", "recipient")
    rest = '<|start|>assistant to=user<|message|>{"ok":true,"n":2}'
    for header, text in [("assistant to=self", "thinking<|eom|>" + rest),
                         ("assistant to=user", '{"ok":false,"n":4}'),
                         ("assistant to=functions.get_weather", call_text("atem")[:] + "<|eom|>")]:  # fmt: skip
        state = COMPILER.state(build_grammar(frontend, ANSWER, token_id=ADDED.get, eos_ids=[EOS],
                                             frame=FrameState(BODY, header)))  # fmt: skip
        consume(state, text)
    named = COMPILER.state(build_grammar(frontend, ANSWER, token_id=ADDED.get, eos_ids=[EOS],
                                         frame=FrameState(BODY, "assistant to=functions.get_time")))  # fmt: skip
    for token in tokens('<atem:function_calls>\n<atem:invoke name="get_'):
        named.advance(token)
    assert not allowed(named, tokens("w")[0]) and allowed(named, tokens("t")[0])
    with pytest.raises(GrammarUnavailable):
        build_grammar(frontend, StructuredOutput(TOOL_REQUIRED, tools=TOOLS), token_id=ADDED.get, eos_ids=[EOS],
                      frame=FrameState(BODY, "assistant to=user"))  # fmt: skip


def test_text_delimiters_end_reasoning_at_the_tool_opener() -> None:
    frontend, state = state_for("xtml", "xtml")
    parsed = parse(frontend, consume(state, "<xtml:think>checking" + call_text("xtml")))
    assert parsed.reasoning == "checking" and [c.name for c in parsed.tool_calls] == ["get_weather"]
    _, state = state_for("xtml", "xtml")
    consume(state, '<xtml:think>plan</xtml:think>{"ok":true,"n":0}')
