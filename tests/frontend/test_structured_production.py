"""Structured output under the batching production runtime (on CPU it drives the reference engine's
rounds): constrained requests beside unconstrained ones, each sampling lane carrying its grammar's
mask, the grammar advanced before the request's next round, every answer valid, and the two flare_
measurements: one outstanding round after every constrained submission, mixed decodes counted."""

from __future__ import annotations

import asyncio
import json

import pytest

from helios.engine.worker import BatchingRuntime
from helios.frontend.bootstrap import Bootstrap
from helios.frontend.openai_request import parse_chat_request
from helios.frontend.pipeline import OutputAccumulator
from helios.frontend.preparation import Preparer
from helios.ignition.prepare import PreparationOptions, prepare_checkpoint
from helios.reference.engine import ReferenceEngine
from helios.runtime.events import Failed, Finished, Rejected, Termination, TokenEvent
from helios.runtime.limits import AdmissionLimits

SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 99}},
          "required": ["n"], "additionalProperties": False}  # fmt: skip
OPTIONS = PreparationOptions(dtype="fp32", page_tokens=4, batch_capacities=(1, 2, 4), prefill_capacities=(16, 32),
                             context_tokens=96)  # fmt: skip


@pytest.fixture(scope="module")
def core(tiny_checkpoint):
    return prepare_checkpoint(tiny_checkpoint("qwen3"), OPTIONS)


def test_constrained_and_unconstrained_requests_share_rounds(core) -> None:
    contract = core.contract
    engine = ReferenceEngine.load(core, pages=64)
    runtime = BatchingRuntime.for_executor(engine.executor, engine.contract, AdmissionLimits(max_active=4, queue_capacity=8),
                                             pages=64)  # fmt: skip
    vocabulary = contract.model.vocabulary
    preparer = Preparer(Bootstrap.from_core(core), served_id=contract.served_id, context_tokens=contract.context_tokens,
                        sampled_tokens=vocabulary.sampled_tokens, mask_words=vocabulary.mask_words)  # fmt: skip

    def body(seed: int, constrained: bool) -> dict:
        request = {"messages": [{"role": "user", "content": "n?"}], "seed": seed, "max_tokens": 12,
                   "chat_template_kwargs": {"enable_thinking": False}}  # fmt: skip
        if constrained:
            request["response_format"] = {"type": "json_schema", "json_schema": {"name": "n", "schema": SCHEMA}}
        return request

    async def one(seed: int, constrained: bool):
        prepared = preparer.prepare_chat(parse_chat_request(body(seed, constrained)), f"r{seed}-{constrained}")
        accumulator = OutputAccumulator()
        async for event in runtime.submit(prepared.runtime_request):
            if isinstance(event, TokenEvent):
                accumulator.add(prepared.pipeline.feed(event.pieces))
            elif isinstance(event, Finished):
                accumulator.add(prepared.pipeline.feed(event.pieces))
                accumulator.add(prepared.pipeline.finish())
                return constrained, accumulator.result(), event.termination
            elif isinstance(event, Failed | Rejected):
                raise AssertionError(event)

    async def main():
        runtime.start()
        try:
            before = runtime.metrics()
            results = await asyncio.gather(*(one(seed, seed % 2 == 0) for seed in range(8)))
            return before, results, runtime.metrics()
        finally:
            await asyncio.to_thread(runtime.shutdown)

    before, results, after = asyncio.run(main())
    for constrained, parsed, termination in results:
        if constrained:
            assert termination == Termination.EOS and set(json.loads(parsed.content)) == {"n"}, parsed
    assert before.constrained_max_inflight == 0 and after.constrained_max_inflight == 1
    assert after.mixed_grammar_decode_steps > 0  # decodes whose lanes mixed the two kinds
