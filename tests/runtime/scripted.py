"""A scripted TokenEngine for host tests: yields given ids, optionally slowly or failing, and
records which generations were closed (released)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

from helios.runtime.request import GenerationRequest


class ScriptedEngine:
    def __init__(
        self,
        script: Callable[[GenerationRequest], Sequence[int]] | Sequence[int],
        *,
        delay_s: float = 0.0,
        fail_at: int | None = None,
    ) -> None:
        self._script = script
        self.delay_s = delay_s
        self.fail_at = fail_at
        self.started: list[tuple[int, ...]] = []
        self.released = 0
        self.lock = threading.Lock()

    def generate(self, request: GenerationRequest) -> Iterator[int]:
        ids = self._script(request) if callable(self._script) else self._script
        with self.lock:
            self.started.append(request.prompt_token_ids)
        try:
            for index, token in enumerate(ids):
                if self.fail_at is not None and index == self.fail_at:
                    raise RuntimeError("device fault")
                if self.delay_s:
                    time.sleep(self.delay_s)
                yield token
        finally:
            with self.lock:
                self.released += 1
