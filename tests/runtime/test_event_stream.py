"""EventStream.put_many: a round's events reach each serving loop in one hand-over, in order per stream,
whether the streams share one loop or are served by several."""

from __future__ import annotations

import asyncio
import threading

from helios.runtime.events import Finished, Termination, TokenEvent
from helios.runtime.interface import EventStream


def _finished() -> Finished:
    return Finished(termination=Termination.LENGTH, pieces=(), prompt_tokens=1, output_tokens=2,
                    reused_prompt_tokens=0)


def test_one_loop_gets_the_round_in_order_per_stream() -> None:
    loop = asyncio.new_event_loop()
    try:
        a, b = EventStream("a", loop), EventStream("b", loop)
        events = [(a, TokenEvent(1, (), None)), (b, TokenEvent(2, (), None)), (a, TokenEvent(3, (), None)),
                  (b, _finished())]
        thread = threading.Thread(target=EventStream.put_many, args=(events,))
        thread.start()
        thread.join()
        EventStream.put_many([])  # nothing to hand over

        async def read() -> tuple[list, list]:
            first = [await a.next(), await a.next()]
            second = [await b.next(), await b.next()]
            return first, second

        first, second = loop.run_until_complete(read())
        assert [e.token_id for e in first] == [1, 3]
        assert second[0].token_id == 2 and isinstance(second[1], Finished) and b.done and not a.done
    finally:
        loop.close()


def test_streams_of_several_loops_each_get_their_own_events() -> None:
    loops = [asyncio.new_event_loop(), asyncio.new_event_loop()]
    try:
        a, b = EventStream("a", loops[0]), EventStream("b", loops[1])
        EventStream.put_many([(a, TokenEvent(1, (), None)), (b, TokenEvent(2, (), None)),
                              (a, TokenEvent(3, (), None))])
        assert [e.token_id for e in loops[0].run_until_complete(_take(a, 2))] == [1, 3]
        assert [e.token_id for e in loops[1].run_until_complete(_take(b, 1))] == [2]
        assert a.ready() == [] and b.ready() == []
    finally:
        for loop in loops:
            loop.close()


def test_a_closed_loop_drops_its_events() -> None:
    loop = asyncio.new_event_loop()
    stream = EventStream("a", loop)
    loop.close()
    EventStream.put_many([(stream, TokenEvent(1, (), None))])  # nobody can read: dropped, no error


async def _take(stream: EventStream, count: int) -> list:
    return [await stream.next() for _ in range(count)]
