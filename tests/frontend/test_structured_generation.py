"""Structured output end to end with a tiny random model: request parsing, preparation (template,
grammar), the worker feeding each round's grammar mask to the reference engine, and the
OutputPipeline. A random model produces arbitrary tokens, so the mask alone makes every output
parse and validate."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from helios.engine.sequential import SequentialRuntime
from helios.frontend.bootstrap import Bootstrap
from helios.frontend.openai_request import parse_chat_request
from helios.frontend.pipeline import OutputAccumulator, OutputPipeline
from helios.frontend.preparation import Preparer
from helios.frontend.stops import OutputFilter, StopSpec
from helios.frontend.structured import (
    JSON_SCHEMA,
    GrammarCompiler,
    StructuredOutput,
    added_token_ids,
    build_grammar,
)
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.reference.engine import AdmissionRejected, ReferenceEngine
from helios.runtime.events import Failed, Finished, Rejected, Termination, TokenEvent
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest, SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 99}},
    "required": ["ok", "n"],
    "additionalProperties": False,
}
MAX_TOKENS = 24  # the longest document ({"ok":false,"n":99}) is 20 tokens, plus EOS


def validates(document) -> bool:
    return (isinstance(document, dict) and set(document) == {"ok", "n"} and isinstance(document["ok"], bool)
            and type(document["n"]) is int and 0 <= document["n"] <= 99)  # fmt: skip


@pytest.fixture(scope="module")
def served(tiny_checkpoint):
    core = prepare_checkpoint(tiny_checkpoint("qwen3"), PreparationOptions(
        dtype="fp32", page_tokens=16, batch_capacities=(1,), prefill_capacities=(64,)))  # fmt: skip
    contract = core.contract
    bootstrap = Bootstrap.from_core(core)
    engine = ReferenceEngine.load(core)
    vocabulary = contract.model.vocabulary
    preparer = Preparer(bootstrap, served_id=contract.served_id, context_tokens=contract.context_tokens,
                        sampled_tokens=vocabulary.sampled_tokens, mask_words=vocabulary.mask_words)  # fmt: skip
    return engine, preparer, contract


async def _run(runtime: SequentialRuntime, request: PreparedRequest, pipeline: OutputPipeline):
    accumulator = OutputAccumulator()
    tokens: list[int] = []
    async for event in runtime.submit(request):
        if isinstance(event, TokenEvent):
            tokens.append(event.token_id)
            accumulator.add(pipeline.feed(event.pieces))
        elif isinstance(event, Finished):
            accumulator.add(pipeline.feed(event.pieces))
            accumulator.add(pipeline.finish())
            return accumulator.result(), tokens, event.termination
        elif isinstance(event, Failed | Rejected):
            raise AssertionError(event)
    raise AssertionError("no terminal event")


def _runtime(engine, contract) -> SequentialRuntime:
    return SequentialRuntime(engine, AdmissionLimits(max_active=1, queue_capacity=4), context_tokens=contract.context_tokens,
                         vocab_size=contract.model.vocabulary.sampled_tokens, rejections=(AdmissionRejected,))  # fmt: skip


def test_fifty_seeded_generations_parse_and_validate(served) -> None:
    engine, preparer, contract = served

    async def main() -> list:
        runtime = _runtime(engine, contract)
        runtime.start()
        results = []
        try:
            for seed in range(50):
                body = {"messages": [{"role": "user", "content": "Reply in JSON."}], "seed": seed, "temperature": 1.0,
                        "max_tokens": MAX_TOKENS, "chat_template_kwargs": {"enable_thinking": False},
                        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}},
                        "return_token_ids": True}  # fmt: skip
                prepared = preparer.prepare_chat(parse_chat_request(body), f"req-{seed}")
                assert prepared.runtime_request.grammar is not None
                results.append(await _run(runtime, prepared.runtime_request, prepared.pipeline))
            return results, runtime.metrics()
        finally:
            await asyncio.to_thread(runtime.shutdown)

    results, metrics = asyncio.run(main())
    documents = set()
    for parsed, tokens, termination in results:
        assert termination == Termination.EOS, (parsed, tokens)  # the grammar closed within the limit
        assert parsed.reasoning is None and parsed.tool_calls == ()
        document = json.loads(parsed.content)
        assert validates(document), parsed.content
        documents.add(parsed.content)
    assert len(documents) > 10  # seeded sampling, not one forced answer
    assert metrics.constrained_max_inflight == 1 and metrics.mixed_grammar_decode_steps == 0


def test_reasoning_stays_free_and_the_answer_validates(served) -> None:
    """Reasoning opened by the prompt: every reasoning step's mask allows every id but EOS, and the
    answer after the close delimiter validates. A negative frequency penalty on the close token,
    which the prompt holds twice, lets a random model close its reasoning soon."""
    engine, preparer, contract = served
    bootstrap = preparer.bootstrap
    added = added_token_ids(bootstrap.tokenizer)
    close = added["</think>"]
    vocabulary = contract.model.vocabulary
    compiler = GrammarCompiler(bootstrap.tokenizer_json, eos_ids=bootstrap.eos_token_ids,
                               vocab_size=vocabulary.sampled_tokens, mask_words=vocabulary.mask_words)  # fmt: skip
    prompt = bootstrap.render_chat([{"role": "user", "content": "</think></think> JSON please"}]) + "<think>\n"
    assert bootstrap.prompt_opens_reasoning(prompt)
    prompt_ids = tuple(bootstrap.encode(prompt))
    grammar = build_grammar(bootstrap.frontend, StructuredOutput(JSON_SCHEMA, schema=SCHEMA), token_id=added.get,
                            eos_ids=bootstrap.eos_token_ids, reasoning_open=True)  # fmt: skip

    class Recording:
        def __init__(self) -> None:
            self.state = compiler.state(grammar)
            self.masks: list[tuple[int, ...]] = []

        def mask(self):
            self.masks.append(self.state.mask())
            return self.masks[-1]

        def advance(self, token: int) -> None:
            self.state.advance(token)

    async def main() -> list:
        runtime = _runtime(engine, contract)
        runtime.start()
        out = []
        try:
            for seed in range(8):
                recording = Recording()
                generation = GenerationRequest(prompt_ids, max_tokens=64, eos_token_ids=bootstrap.eos_token_ids,
                                               sampling=SamplingParams(temperature=1.0, seed=seed, frequency_penalty=-2.0))  # fmt: skip
                markers = bootstrap.delimiter_markers()
                request = PreparedRequest(f"think-{seed}", generation, OutputFilter(bootstrap.tokenizer, StopSpec(), markers),
                                          grammar=recording)  # fmt: skip
                pipeline = OutputPipeline(bootstrap.frontend, token_only=frozenset(markers.values()),
                                          reasoning_open=True, structured=True)  # fmt: skip
                out.append((recording, *(await _run(runtime, request, pipeline))))
            return out
        finally:
            await asyncio.to_thread(runtime.shutdown)

    eos = set(bootstrap.eos_token_ids)
    closed = 0
    for recording, parsed, tokens, termination in asyncio.run(main()):
        end = tokens.index(close) if close in tokens else len(tokens)
        for words in recording.masks[: end + 1]:  # the reasoning steps, the close delimiter's included
            bits = np.unpackbits(np.array(words, dtype=np.int32).view(np.uint8), bitorder="little")
            assert {i for i in range(vocabulary.sampled_tokens) if not bits[i]} == eos
        if termination == Termination.EOS:
            closed += 1
            assert parsed.reasoning is not None or end == 0
            assert validates(json.loads(parsed.content)), parsed
    assert closed >= 4
