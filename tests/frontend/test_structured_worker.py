"""The worker's grammar binding: a constrained request's engine asks for the grammar mask as it
packs each sampling round, the worker advances the grammar with each validated token before the
next round (one outstanding round), a token outside the mask fails the request, and the two flare_
measurements keep their meaning."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator, Sequence

from helios.engine.sequential import SequentialRuntime
from helios.runtime.events import Failed, Finished, Termination
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest

EOS = 9


class Grammar:
    """Allows exactly the ids of `script`, in order (a mask of one bit), recording every call."""

    def __init__(self, script: Sequence[int]) -> None:
        self.script = list(script)
        self.calls: list[tuple[str, int]] = []
        self.position = 0

    def mask(self) -> tuple[int, ...]:
        self.calls.append(("mask", self.position))
        token = self.script[self.position]
        return tuple((1 << (token % 32)) if word == token // 32 else 0 for word in range(1))

    def advance(self, token: int) -> None:
        self.calls.append(("advance", token))
        if token != self.script[self.position]:
            raise ValueError(f"token {token} outside the mask")
        self.position += 1


class MaskedEngine:
    """Samples the lowest allowed id of each round's mask, or a fixed id when told to misbehave."""

    def __init__(self, ignore_mask_at: int | None = None) -> None:
        self.ignore_mask_at = ignore_mask_at
        self.unconstrained: list[int] = []

    def generate(self, request: GenerationRequest, *, slot: int,
                 grammar_mask: Callable[[], Sequence[int]] | None = None, grammar=None) -> Iterator[int]:  # fmt: skip
        def rounds() -> Iterator[int]:
            for index in range(request.max_tokens):
                if grammar_mask is None:
                    self.unconstrained.append(index)
                    yield 3
                    continue
                words = grammar_mask()
                allowed = [t for t in range(32 * len(words)) if (words[t // 32] >> (t % 32)) & 1]
                token = 7 if index == self.ignore_mask_at else allowed[0]
                yield token
                if token == EOS:
                    return

        return rounds()


def run(engine, requests: list[PreparedRequest]):
    async def main():
        runtime = SequentialRuntime(engine, AdmissionLimits(max_active=2, queue_capacity=4), context_tokens=64, vocab_size=32)
        before = runtime.metrics()
        runtime.start()
        try:
            streams = [runtime.submit(r) for r in requests]
            ends = []
            for stream in streams:
                async for event in stream:
                    if isinstance(event, Finished | Failed):
                        ends.append(event)
            return before, runtime.metrics(), ends
        finally:
            await asyncio.to_thread(runtime.shutdown)

    return asyncio.run(main())


def request(name: str, grammar=None, max_tokens: int = 8) -> PreparedRequest:
    return PreparedRequest(name, GenerationRequest((1, 2), max_tokens=max_tokens, eos_token_ids=(EOS,)), grammar=grammar)


def test_mask_each_round_then_advance_before_the_next() -> None:
    grammar = Grammar([4, 5, 6, EOS])
    before, after, (end,) = run(MaskedEngine(), [request("a", grammar)])
    assert isinstance(end, Finished) and end.termination == Termination.EOS and end.output_tokens == 4
    assert grammar.calls == [("mask", 0), ("advance", 4), ("mask", 1), ("advance", 5), ("mask", 2), ("advance", 6),
                             ("mask", 3), ("advance", EOS)]  # fmt: skip
    assert before.constrained_max_inflight == 0 and after.constrained_max_inflight == 1
    assert after.mixed_grammar_decode_steps == 0


def test_a_token_outside_the_mask_fails_the_request() -> None:
    _, _, (end,) = run(MaskedEngine(ignore_mask_at=1), [request("a", Grammar([4, 5, 6, EOS]))])
    assert isinstance(end, Failed) and "outside the mask" in end.message


def test_constrained_beside_unconstrained() -> None:
    engine = MaskedEngine()
    _, after, ends = run(engine, [request("a", Grammar([4, EOS])), request("b", max_tokens=3)])
    assert [type(e) for e in ends] == [Finished, Finished] and engine.unconstrained == [0, 1, 2]
    # the sequential worker submits one lane a round: no decode mixes the two kinds
    assert after.constrained_max_inflight == 1 and after.mixed_grammar_decode_steps == 0


def test_unconstrained_requests_leave_the_measurements_at_zero() -> None:
    _, after, _ = run(MaskedEngine(), [request("b", max_tokens=2)])
    assert after.constrained_max_inflight == 0 and after.mixed_grammar_decode_steps == 0
