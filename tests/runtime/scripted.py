"""A scripted TokenEngine for host tests: yields given ids, optionally slowly or failing, and
records which generations were closed (released)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence

from helios.runtime.request import GenerationRequest


class ShortOfPages(Exception):
    """The scripted engine's admission rejection."""


class Generation:
    """What the scripted engines' `generate` returns, as the real engines' generations do: the ids,
    and `close()` releasing the slot whether or not iteration began (closing a generator that never
    started runs none of its code, so a request cancelled before its first id would keep its slot)."""

    def __init__(self, ids: Iterator[int], release: Callable[[], None]) -> None:
        self._ids, self._release = ids, release

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> int:
        return next(self._ids)

    def close(self) -> None:
        try:
            self._ids.close()  # type: ignore[attr-defined]
        finally:
            self._release()


class ScriptedEngine:
    def __init__(
        self,
        script: Callable[[GenerationRequest], Sequence[int]] | Sequence[int],
        *,
        delay_s: float = 0.0,
        fail_at: int | None = None,
        reject: Callable[[GenerationRequest, ScriptedEngine], bool] | None = None,
    ) -> None:
        self.reject = reject
        self.slots_in_use: set[int] = set()
        self._script = script
        self.delay_s = delay_s
        self.fail_at = fail_at
        self.started: list[tuple[int, ...]] = []
        self.speculation: list[bool] = []  # each started generation's speculation (False: the request opted out)
        self.released = 0
        self.lock = threading.Lock()

    def generate(self, request: GenerationRequest, *, slot: int, speculation: bool = True) -> Iterator[int]:
        if self.reject is not None and self.reject(request, self):
            raise ShortOfPages("no free pages")
        ids = self._script(request) if callable(self._script) else self._script
        with self.lock:
            self.started.append(request.prompt_token_ids)
            self.speculation.append(speculation)
            assert slot not in self.slots_in_use, f"slot {slot} handed out twice"
            self.slots_in_use.add(slot)
        state = {"held": True}

        def release() -> None:  # once, at exhaustion, failure or close
            with self.lock:
                if state["held"]:
                    state["held"] = False
                    self.released += 1
                    self.slots_in_use.discard(slot)

        return Generation(self._run(ids, release), release)

    def _run(self, ids: Sequence[int], release: Callable[[], None]) -> Iterator[int]:
        try:
            for index, token in enumerate(ids):
                if self.fail_at is not None and index == self.fail_at:
                    raise RuntimeError("device fault")
                if self.delay_s:
                    time.sleep(self.delay_s)
                yield token
        finally:
            release()


class MaskedEngine(ScriptedEngine):
    """A scripted engine that honours grammar masks as a model does: a constrained request samples the
    allowed id the script names when the mask allows it, else the lowest allowed id (EOS once the
    grammar allows only EOS), so structured output runs end to end without a model."""

    def generate(self, request: GenerationRequest, *, slot: int, grammar_mask=None, grammar=None,
                 speculation: bool = True) -> Iterator[int]:
        tokens = super().generate(request, slot=slot, speculation=speculation)
        if grammar_mask is None:
            return tokens
        return Generation(self._masked(tokens, grammar_mask), tokens.close)

    @staticmethod
    def _masked(tokens: Iterator[int], grammar_mask) -> Iterator[int]:
        try:
            for wanted in tokens:
                words = grammar_mask()
                allowed = [w * 32 + b for w, word in enumerate(words) if word for b in range(32) if (word >> b) & 1]
                if not allowed:
                    return
                yield wanted if wanted in allowed else allowed[0]
        finally:
            tokens.close()  # type: ignore[attr-defined]
