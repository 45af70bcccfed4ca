"""One request through any `ModelRuntime`, to its end (host side): what `helios generate` runs.

    tokens = generate_tokens(runtime, request)     # sampled ids, EOS included; starts and shuts the runtime
"""

from __future__ import annotations

import asyncio

from helios.errors import HeliosError
from helios.runtime.events import Failed, Rejected, TokenEvent
from helios.runtime.interface import ModelRuntime, PreparedRequest
from helios.runtime.request import GenerationRequest


class GenerationRejected(HeliosError):
    """The runtime rejected the generation (outside the prepared capacities)."""


class GenerationFailed(HeliosError):
    """The generation failed in execution or output decoding; the message is the runtime's."""


def generate_tokens(runtime: ModelRuntime, request: GenerationRequest) -> list[int]:
    """Start `runtime`, run `request` alone with its ids observed, shut the runtime down."""

    async def run() -> list[int]:
        runtime.start()
        try:
            stream = runtime.submit(PreparedRequest("generate", request, observe_tokens=True))
            tokens = []
            async for event in stream:
                if isinstance(event, TokenEvent):
                    tokens.append(event.token_id)
                elif isinstance(event, Rejected):
                    raise GenerationRejected(f"the request was rejected: {event.reason}")
                elif isinstance(event, Failed):
                    raise GenerationFailed(event.message)
            return tokens
        finally:
            runtime.shutdown()

    return asyncio.run(run())


__all__ = ["GenerationFailed", "GenerationRejected", "generate_tokens"]
