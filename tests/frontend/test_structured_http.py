"""Structured output over HTTP with the OpenAI client: `response_format` json_schema (JSON and SSE)
and `tool_choice` "required" (a streamed call, finish_reason tool_calls), through the real app and
worker, over an engine that samples at random among the ids each round's grammar mask allows."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable, Iterator, Sequence

import openai

from helios.runtime.request import GenerationRequest
from tests.frontend import tinyfront
from tests.server.inprocess import SERVED_ID, serving

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
TOOLS = [{"type": "function", "function": {"name": "set_level", "parameters": {
    "type": "object", "properties": {"level": {"type": "integer", "minimum": 1, "maximum": 5}},
    "required": ["level"]}}}]  # fmt: skip
EOS = tinyfront.token_id("<|im_end|>")
THINK = tinyfront.token_id("<think>")


class MaskedRandomEngine:
    """Arbitrary tokens within each round's mask (reasoning is not opened: these tests are about the
    answer); unconstrained requests get EOS at once."""

    def __init__(self) -> None:
        self.rng = random.Random(3)
        self.lock = threading.Lock()

    def generate(self, request: GenerationRequest, *, slot: int,
                 grammar_mask: Callable[[], Sequence[int]] | None = None, grammar=None) -> Iterator[int]:  # fmt: skip
        def rounds() -> Iterator[int]:
            for _ in range(request.max_tokens):
                if grammar_mask is None:
                    yield EOS
                    return
                words = grammar_mask()
                allowed = [t for t in range(32 * len(words)) if (words[t // 32] >> (t % 32)) & 1]
                with self.lock:
                    token = self.rng.choice([t for t in allowed if t != THINK] or allowed)
                yield token
                if token == EOS:
                    return

        return rounds()


def test_json_schema_answers_validate_whole_and_streamed() -> None:
    with serving(MaskedRandomEngine()) as (base, _):
        client = openai.OpenAI(base_url=base + "/v1", api_key="none")
        response_format = {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}
        for seed in range(5):
            reply = client.chat.completions.create(model=SERVED_ID, messages=[{"role": "user", "content": "JSON"}],
                                                   response_format=response_format, seed=seed, max_tokens=60)  # fmt: skip
            document = json.loads(reply.choices[0].message.content)
            assert set(document) == {"ok", "n"} and reply.choices[0].finish_reason == "stop"
        stream = client.chat.completions.create(model=SERVED_ID, messages=[{"role": "user", "content": "JSON"}],
                                                response_format=response_format, max_tokens=60, stream=True)  # fmt: skip
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        assert set(json.loads(text)) == {"ok", "n"}


def test_required_tool_choice_streams_a_valid_call() -> None:
    with serving(MaskedRandomEngine()) as (base, _):
        client = openai.OpenAI(base_url=base + "/v1", api_key="none")
        stream = client.chat.completions.create(model=SERVED_ID, messages=[{"role": "user", "content": "go"}],
                                                tools=TOOLS, tool_choice="required", max_tokens=200, stream=True)  # fmt: skip
        names: dict[int, str] = {}
        arguments: dict[int, str] = {}
        finish = None
        for chunk in stream:
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    if call.function.name:
                        names[call.index] = call.function.name
                    arguments[call.index] = arguments.get(call.index, "") + (call.function.arguments or "")
                finish = choice.finish_reason or finish
        assert names and set(names.values()) == {"set_level"} and finish == "tool_calls"
        for text in arguments.values():
            document = json.loads(text)
            assert set(document) == {"level"} and 1 <= document["level"] <= 5
