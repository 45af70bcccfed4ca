"""Request progress (host side): what a runtime does with each validated token of one request.

Owns: `RequestProgress` and `InvalidSampledId`. Every runtime's worker (the sequential worker
today, a batching one later) calls `accept(token)` for each completion row it retires, in order:

    validate the id -> read the observation clock (timed requests only) -> advance the grammar
    (constrained requests) -> EOS -> output filter (decoding, host stops) -> output limit -> deliver
    TokenEvent

and gets back the termination, if the request just ended; the worker then releases the request's
engine resources and calls `finish`. Keeping this in one place keeps termination, stop and
observation semantics identical across runtimes.
"""

from __future__ import annotations

from helios.errors import HeliosError
from helios.runtime.clock import ObservationClock
from helios.runtime.events import Failed, Finished, Termination, TokenEvent
from helios.runtime.interface import EventStream, PreparedRequest


class InvalidSampledId(HeliosError):
    """An engine reported a sampled id outside the vocabulary (an execution failure)."""


class RequestProgress:
    __slots__ = ("_clock", "_eos", "_flushed", "_vocab_size", "request", "sampled", "stream")

    def __init__(
        self, request: PreparedRequest, stream: EventStream, clock: ObservationClock, vocab_size: int,
        default_eos_ids: tuple[int, ...] = (),
    ) -> None:
        self.request = request
        self.stream = stream
        self.sampled = 0  # every sampled token: usage and observation count them all
        self._clock = clock
        self._vocab_size = vocab_size
        # A request naming no EOS ids ends at the core's, where the engine ends it.
        self._eos = request.generation.eos_token_ids or default_eos_ids
        self._flushed: tuple[object, ...] = ()

    def accept(self, token: int) -> Termination | None:
        """One validated completion of this request. Raises InvalidSampledId for a bad id; a failing
        output filter raises its own error (an output failure)."""
        if not isinstance(token, int) or not 0 <= token < self._vocab_size:
            raise InvalidSampledId(
                f"the engine sampled id {token!r}, outside the vocabulary of {self._vocab_size}"
            )
        request = self.request
        generation = request.generation
        self.sampled += 1
        # NOTE: read right after validation, before stops and parsing; never for unobserved requests
        timestamp = self._clock.now_ns() if request.observe_timestamps else None
        if request.grammar is not None:
            request.grammar.advance(token)  # after the clock, before stops and parsing
        output = request.output_filter
        if token in self._eos and not generation.ignore_eos:
            if request.observe_tokens:
                self.stream.put(TokenEvent(token, (), timestamp))
            self._flushed = tuple(output.finish()) if output is not None else ()
            return Termination.EOS
        step = output.push(token) if output is not None else None
        pieces = tuple(step.pieces) if step is not None else ()
        if pieces or request.observe_tokens:
            self.stream.put(TokenEvent(token, pieces, timestamp))
        if step is not None and step.stopped:
            return Termination.STOP
        if self.sampled >= generation.max_tokens:
            return self.limit()
        return None

    def limit(self) -> Termination:
        """The output limit was reached (or the engine ended early at a full context)."""
        output = self.request.output_filter
        self._flushed = tuple(output.finish()) if output is not None else ()
        return Termination.LENGTH

    def finish(self, termination: Termination, *, reused_prompt_tokens: int = 0) -> None:
        """Deliver the terminal event, after the worker released the request's resources."""
        pieces = self._flushed if termination in (Termination.EOS, Termination.LENGTH) else ()
        self.stream.put(
            Finished(
                termination=termination,
                pieces=pieces,
                prompt_tokens=len(self.request.generation.prompt_token_ids),
                output_tokens=self.sampled,
                reused_prompt_tokens=reused_prompt_tokens,
            )
        )

    def fail(self, message: str) -> None:
        self.stream.put(Failed(message))
