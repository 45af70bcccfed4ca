"""What the batching runtime does with each retired token (host side): `TokenDelivery`, the part of
`BatchingRuntime` between the scheduler's `RoundOutcomes` and the request streams.

    per retired token: RequestProgress.accept (grammar, EOS, output filter, output limit; progress.py)
      -> TokenEvent, then the terminal event when the request ends -> scheduler.finish

A round's events (tokens, terminal events) reach each serving loop in one call
(`EventStream.put_many`), in order per stream. A grammar the sampled token breaks fails that request
alone as an execution failure; an output failure (decoding, stop matching, the final flush) fails
it alone as an output failure.

`TokenDelivery` is a base of `BatchingRuntime` (worker.py), which owns the state it reads: the lock,
the scheduler, the requests' progress by request id, the failure and termination counts.
"""

from __future__ import annotations

from helios.engine.outcomes import RoundOutcomes
from helios.engine.progress import GrammarViolated, RequestProgress
from helios.runtime.events import Event, Failed, Termination
from helios.runtime.interface import EventStream


class TokenDelivery:
    """Token delivery for `BatchingRuntime`; see the module docstring."""

    _outbox: list[tuple[EventStream, Event]] | None  # the round's events, while a round is delivered

    def _deliver_round(self, outcomes: RoundOutcomes, entries: list[RequestProgress | None], stamp: int | None,
                       scored: list[tuple[RequestProgress | None, object]] = ()) -> None:
        """Every retired token of one round (`entries[i]` is the request of outcome i, None when the
        request is gone; `stamp` the clock's reading, when a timed request has a token), after the
        prompt scores of a scored round (`scored`: each request's progress and its `PromptScoreEvent`);
        the round's events reach the serving loops together."""
        outbox = self._outbox = []
        put = self._put
        try:
            for entry, event in scored:  # a prompt's scores precede its first token
                if entry is not None:
                    put(entry.stream, event)  # type: ignore[arg-type]
            ended_here: set[int] = set()  # a speculative round may emit several tokens of a request: a
            for entry, token in zip(entries, outcomes.tokens, strict=True):  # stop among them ends it there
                if entry is None or id(entry) in ended_here:
                    continue
                try:
                    ended = entry.accept(token, stamp if entry.timed else None, put)
                except GrammarViolated as error:  # the mask was not honoured: an execution fault of this request
                    ended_here.add(id(entry))
                    self._end(entry, None, (), failure=f"model execution failed: {error}")
                    continue
                except Exception as error:  # output errors (HTTP 500) of this request only
                    ended_here.add(id(entry))
                    self._end(entry, None, (), failure=f"output decoding failed: {type(error).__name__}: {error}")
                    continue
                if ended is not None:
                    ended_here.add(id(entry))
                    self._end(entry, *ended)
        finally:
            outbox, self._outbox = self._outbox, None
            EventStream.put_many(outbox)

    def _put(self, stream: EventStream, event: Event) -> None:
        """Deliver now, or with the round's events while a round is delivered (same order per stream)."""
        if self._outbox is not None:
            self._outbox.append((stream, event))
        else:
            stream.put(event)

    def _end(self, entry: RequestProgress, termination: Termination | None, pieces: tuple[object, ...], *,
             failure: str | None = None) -> None:
        request_id = entry.request.request_id
        with self._lock:
            reused = self._scheduler.reused_prompt_tokens(request_id)
            # a matched stop, a cancellation or a failure publishes no continuation (the specification)
            self._scheduler.finish(request_id, publish=failure is None
                                   and termination in (Termination.EOS, Termination.LENGTH))
            if failure is not None:
                self._entries.pop(request_id, None)
                self._failed += 1
            else:
                assert termination is not None
                self._finish(entry, termination, pieces, reused=reused)
        if failure is not None:
            self._put(entry.stream, Failed(failure))

    def _finish(self, entry: RequestProgress, termination: Termination, pieces: tuple[object, ...], *,
                reused: int) -> None:
        """Under the lock: forget the request and deliver its terminal event."""
        self._entries.pop(entry.request.request_id, None)
        self._finished[termination.value] += 1
        self._put(entry.stream, entry.finished(termination, pieces, reused_prompt_tokens=reused))
