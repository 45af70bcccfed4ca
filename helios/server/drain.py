"""Shutdown drain (host side): how a stopping server ends the requests it holds.

Owns: `Drain` and `ShuttingDown`. On SIGTERM or SIGINT (`serve.HeliosServer`) the drain begins:
admission stops at once (a new request on an open connection gets 503 with `Retry-After`), and
running requests get `DRAIN_S` seconds to finish. Then the drain closes: every open response gets
`ShuttingDown` on its event stream, the server's own terminal event, so a stream ends with its
terminal error event and a waiting JSON request with a JSON 503, and their requests are cancelled.
Runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

DRAIN_S = 5.0  # the specification's connection drain
MESSAGE = "the server is shutting down"


class ShuttingDown:
    """Put on an open response's event stream when the drain closes (never by a runtime)."""

    __slots__ = ()
    message = MESSAGE


SHUTTING_DOWN = ShuttingDown()


class Drain:
    def __init__(self) -> None:
        self.draining = False  # admission has stopped
        self.closed = False  # the drain window is over: open responses are being ended
        self._open: set[Any] = set()  # event streams of responses still being written

    def begin(self) -> None:
        self.draining = True

    def track(self, stream: Any) -> None:
        if self.closed:
            stream.put_nowait(SHUTTING_DOWN)
        self._open.add(stream)

    def untrack(self, stream: Any) -> None:
        self._open.discard(stream)

    def close(self) -> None:
        self.closed = True
        for stream in list(self._open):
            stream.put_nowait(SHUTTING_DOWN)

    async def close_after(self, held: Callable[[], int], seconds: float = DRAIN_S) -> None:
        """Close once nothing is held (`held()`: admission permits in use) or `seconds` have passed."""
        self.begin()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while held() and loop.time() < deadline:
            await asyncio.sleep(0.05)
        self.close()
