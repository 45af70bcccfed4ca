"""Serving a list of requests through any `ModelRuntime` in tests (test helper): start it, submit
every request, collect each stream's token ids and terminal event in order, shut it down."""

from __future__ import annotations

import asyncio

from helios.runtime.events import Event, TokenEvent
from helios.runtime.interface import PreparedRequest


async def collect(stream) -> tuple[list[int], Event]:
    """A stream's token ids and its terminal event."""
    tokens = []
    async for event in stream:
        if isinstance(event, TokenEvent):
            tokens.append(event.token_id)
        else:
            return tokens, event
    raise AssertionError("the stream ended without a terminal event")


def serve_all(runtime, requests: list[PreparedRequest]) -> list[tuple[list[int], Event]]:
    async def main():
        runtime.start()
        try:
            streams = [runtime.submit(r) for r in requests]
            return [await collect(s) for s in streams]
        finally:
            runtime.shutdown()

    return asyncio.run(main())
