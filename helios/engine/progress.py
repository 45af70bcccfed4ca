"""Request progress (host side): what every runtime's worker does with each validated token of one
request, written once.

Owns `RequestProgress` and `GrammarViolated`. Both workers (the sequential one,
sequential.py, and the batching one, worker.py with delivery.py) call `accept` for each token they
retire, in order:

    advance the grammar (constrained requests) -> EOS -> output filter (decoding, host stops)
      -> output limit -> TokenEvent (when there are pieces, or ids are observed)

and get back the termination with the pieces still to flush, or None while the request goes on. A
request without a grammar or an output filter (`plain`) takes a short path: an id that does not end
it is at most a `TokenEvent`, then the output limit. A request naming no EOS ids ends at the core's,
as its lanes tell the device; `ignore_eos` ends at none. The worker then releases the request's
resources and delivers `finished(...)`.
"""

from __future__ import annotations

from collections.abc import Callable

from helios.errors import HeliosError
from helios.runtime.events import Event, Finished, Termination, TokenEvent
from helios.runtime.interface import EventStream, PreparedRequest

Put = Callable[[EventStream, Event], None]  # deliver one event of one request's stream


class GrammarViolated(HeliosError):
    """The sampled token is outside the request's grammar: the device did not honour the mask (an
    execution failure of this request; the message is the grammar's own error)."""


class RequestProgress:
    """One request's delivery state; see the module docstring."""

    __slots__ = ("ends_at", "max_tokens", "observe", "plain", "request", "sampled", "stream", "timed")

    def __init__(self, request: PreparedRequest, stream: EventStream, default_eos_ids: tuple[int, ...] = ()) -> None:
        generation = request.generation
        self.request = request
        self.stream = stream
        self.sampled = 0  # every sampled token: usage and observation count them all
        # Read once, for the per-token path:
        self.plain = request.grammar is None and request.output_filter is None
        self.ends_at: tuple[int, ...] = () if generation.ignore_eos else tuple(generation.eos_token_ids
                                                                               or default_eos_ids)
        self.observe = request.observe_tokens
        self.timed = request.observe_timestamps
        self.max_tokens = generation.max_tokens

    def accept(self, token: int, timestamp: int | None, put: Put) -> tuple[Termination, tuple[object, ...]] | None:
        """One validated token (`timestamp`: the observation clock's reading for a timed request).
        Raises `GrammarViolated` when the grammar refuses the token; an output filter's own error (a
        decoding or stop-matching failure, HTTP 500) propagates."""
        self.sampled += 1
        if self.plain and token not in self.ends_at:
            if self.observe:
                put(self.stream, TokenEvent(token, (), timestamp))
            return (Termination.LENGTH, ()) if self.sampled >= self.max_tokens else None
        request = self.request
        if request.grammar is not None:  # after the clock, before stops and parsing
            try:
                request.grammar.advance(token)
            except Exception as error:
                raise GrammarViolated(f"{type(error).__name__}: {error}") from error
        output = request.output_filter
        if token in self.ends_at:
            if self.observe:
                put(self.stream, TokenEvent(token, (), timestamp))
            return Termination.EOS, self.flush()
        step = output.push(token) if output is not None else None
        pieces = tuple(step.pieces) if step is not None else ()
        if pieces or self.observe:
            put(self.stream, TokenEvent(token, pieces, timestamp))
        if step is not None and step.stopped:
            return Termination.STOP, ()
        if self.sampled >= self.max_tokens:
            return Termination.LENGTH, self.flush()
        return None

    def flush(self) -> tuple[object, ...]:
        """The output filter's buffered pieces (an unmatched stop prefix, partial text): released at
        EOS and at the output limit (also when an engine ends early at a full context)."""
        output = self.request.output_filter
        return tuple(output.finish()) if output is not None else ()

    def finished(self, termination: Termination, pieces: tuple[object, ...], *, reused_prompt_tokens: int = 0) -> Finished:
        """The terminal event, once the worker released the request's resources."""
        return Finished(termination=termination, pieces=pieces,
                        prompt_tokens=len(self.request.generation.prompt_token_ids), output_tokens=self.sampled,
                        reused_prompt_tokens=reused_prompt_tokens)


__all__ = ["GrammarViolated", "Put", "RequestProgress"]
