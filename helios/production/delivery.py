"""What the production runtime does with each retired token (host side, no torch): `TokenDelivery`,
the part of `ProductionRuntime` between the scheduler's `RoundOutcomes` and the request streams.

    per retired token: grammar advance / EOS / output filter (decoding, host stops) / output limit
      -> TokenEvent, then the terminal event when the request ends -> scheduler.finish

A round's events (tokens, terminal events) reach each serving loop in one call
(`EventStream.put_many`), in order per stream. A request without a grammar or an output filter
takes a short path (EOS check, its `TokenEvent` if observed, the output limit). An output failure
(decoding, stop matching, the final flush) or a grammar the sampled token breaks fails that request
alone. `RequestEntry` is the runtime's record of one submitted request.

`TokenDelivery` is a base of `ProductionRuntime` (runtime.py), which owns the state it reads: the
lock, the scheduler, the entries by request id, the failure and termination counts.
"""

from __future__ import annotations

from dataclasses import dataclass

from helios.production.scheduling import LaneOutcome, RoundOutcomes
from helios.runtime.events import Event, Failed, Finished, Termination, TokenEvent
from helios.runtime.interface import EventStream, PreparedRequest


@dataclass(slots=True, eq=False)
class RequestEntry:
    """One submitted request as the runtime holds it until its terminal event."""

    request: PreparedRequest
    stream: EventStream
    sampled: int = 0
    # Read once at submission for the per-token fast path of `_deliver_round`:
    plain: bool = False  # no grammar and no output filter: a token is at most a TokenEvent
    ends_at: tuple[int, ...] = ()  # ids that end the request (EOS; empty when it ignores EOS)
    observe: bool = False  # observe_tokens
    timed: bool = False  # observe_timestamps
    max_tokens: int = 0


class TokenDelivery:
    """Token delivery for `ProductionRuntime`; see the module docstring."""

    _outbox: list[tuple[EventStream, Event]] | None  # the round's events, while a round is delivered

    def _deliver_round(self, outcomes: RoundOutcomes, entries: list[RequestEntry | None], stamp: int | None) -> None:
        """Every retired token of one round (`entries[i]` is the runtime's entry for outcome i, None
        when the request is gone); the round's events reach the serving loops together."""
        outbox = self._outbox = []
        try:
            for entry, token, sampled in zip(entries, outcomes.tokens, outcomes.sampled, strict=True):
                if entry is None:
                    continue
                if entry.plain and token not in entry.ends_at:
                    # `_deliver` without a grammar or an output filter, for a token that is not EOS:
                    # the event (if observed), then the output limit
                    entry.sampled = sampled
                    if entry.observe:
                        outbox.append((entry.stream, TokenEvent(token, (), stamp if entry.timed else None)))
                    if sampled >= entry.max_tokens:
                        self._end(entry, Termination.LENGTH, ())
                    continue
                self._deliver(LaneOutcome(entry.request.request_id, token, sampled), entry, stamp)
        finally:
            outbox, self._outbox = self._outbox, None
            EventStream.put_many(outbox)

    def _put(self, stream: EventStream, event: Event) -> None:
        """Deliver now, or with the round's events while a round is delivered (same order per stream)."""
        if self._outbox is not None:
            self._outbox.append((stream, event))
        else:
            stream.put(event)

    def _deliver(self, outcome: LaneOutcome, entry: RequestEntry, stamp: int | None) -> None:
        """One validated token: observe, check EOS, stops and the output limit, deliver. An output
        failure (decoding, stop matching or the final flush) fails this request alone."""
        entry.sampled = outcome.sampled
        timestamp = stamp if entry.request.observe_timestamps else None
        if entry.request.grammar is not None:  # after the clock, before stops and parsing
            try:
                entry.request.grammar.advance(outcome.token)
            except Exception as error:  # the mask was not honoured: an execution fault of this request
                self._end(entry, None, (), failure=f"model execution failed: {type(error).__name__}: {error}")
                return
        try:
            ended = self._observe(entry, outcome.token, timestamp)
        except Exception as error:  # output errors (HTTP 500) of this request only
            self._end(entry, None, (), failure=f"output decoding failed: {type(error).__name__}: {error}")
            return
        if ended is not None:
            self._end(entry, *ended)

    def _observe(self, entry: RequestEntry, token: int, timestamp: int | None) -> tuple[Termination, tuple[object, ...]] | None:
        """EOS, then the output filter (decoding, host stops), then the output limit: the termination
        and the pieces still to flush, or None while the request goes on. A request naming no EOS
        ids ends at the core's, as its lanes tell the device."""
        request = entry.request
        generation = request.generation
        output = request.output_filter
        eos = generation.eos_token_ids or self._scheduler.config.eos_ids
        if token in eos and not generation.ignore_eos:
            if request.observe_tokens:
                self._put(entry.stream, TokenEvent(token, (), timestamp))
            return Termination.EOS, tuple(output.finish()) if output is not None else ()
        step = output.push(token) if output is not None else None
        pieces = tuple(step.pieces) if step is not None else ()
        if pieces or request.observe_tokens:
            self._put(entry.stream, TokenEvent(token, pieces, timestamp))
        if step is not None and step.stopped:
            return Termination.STOP, ()
        if entry.sampled >= generation.max_tokens:
            return Termination.LENGTH, tuple(output.finish()) if output is not None else ()
        return None

    def _end(self, entry: RequestEntry, termination: Termination | None, pieces: tuple[object, ...], *,
             failure: str | None = None) -> None:
        request_id = entry.request.request_id
        with self._lock:
            reused = self._scheduler.reused_prompt_tokens(request_id)
            self._scheduler.finish(request_id)
            if failure is not None:
                self._entries.pop(request_id, None)
                self._failed += 1
            else:
                assert termination is not None
                self._finish(entry, termination, pieces, reused=reused)
        if failure is not None:
            self._put(entry.stream, Failed(failure))

    def _finish(self, entry: RequestEntry, termination: Termination, pieces: tuple[object, ...], *, reused: int) -> None:
        """Under the lock: forget the request and deliver its terminal event."""
        self._entries.pop(entry.request.request_id, None)
        self._finished[termination.value] += 1
        generation = entry.request.generation
        self._put(entry.stream, Finished(termination=termination, pieces=pieces,
                                  prompt_tokens=len(generation.prompt_token_ids), output_tokens=entry.sampled,
                                  reused_prompt_tokens=reused))
