"""SequentialRuntime: termination semantics, stops through the output filter, observation, admission,
cancellation and failures, over a scripted engine."""

from __future__ import annotations

import asyncio
import time

import pytest
from tokenizers import Tokenizer

from helios.engine.sequential import SequentialRuntime
from helios.frontend.detokenize import join_text
from helios.frontend.stops import OutputFilter, StopSpec
from helios.runtime.events import Failed, Finished, Rejected, Termination, TokenEvent
from helios.runtime.interface import PreparedRequest
from helios.runtime.limits import AdmissionLimits
from helios.runtime.request import GenerationRequest
from tests.frontend import tinyfront
from tests.runtime.scripted import ScriptedEngine, ShortOfPages

TOKENIZER = Tokenizer.from_str(tinyfront.byte_level_tokenizer_json())
EOS = tinyfront.token_id("<|im_end|>")
VOCAB = TOKENIZER.get_vocab_size()


def ids(text: str) -> list[int]:
    return TOKENIZER.encode(text, add_special_tokens=False).ids


def prepared(
    request_id: str, *, max_tokens=32, stops=StopSpec(), prompt=(1, 2, 3), **flags
) -> PreparedRequest:
    generation = GenerationRequest(
        prompt_token_ids=tuple(prompt), max_tokens=max_tokens, eos_token_ids=(EOS,)
    )
    return PreparedRequest(
        request_id, generation, OutputFilter(TOKENIZER, stops), host_stop=stops.host_stop, **flags
    )


async def collect(stream) -> list:
    return [event async for event in stream]


def run_requests(
    engine,
    requests,
    *,
    limits=AdmissionLimits(max_active=2, queue_capacity=4),
    context=4096,
    during=None,
    rejections=(),
):
    async def main():
        runtime = SequentialRuntime(engine, limits, context_tokens=context, vocab_size=VOCAB, rejections=rejections)
        runtime.start()
        try:
            streams = [runtime.submit(r) for r in requests]
            if during is not None:
                await during(runtime, streams)
            results = await asyncio.wait_for(asyncio.gather(*(collect(s) for s in streams)), 10)
            return runtime, results
        finally:
            runtime.shutdown()

    return asyncio.run(main())


def text_of(events) -> str:
    pieces = [p for e in events if isinstance(e, TokenEvent) for p in e.pieces]
    pieces += [p for e in events if isinstance(e, Finished) for p in e.pieces]
    return join_text(pieces)


def test_eos_length_and_usage() -> None:
    engine = ScriptedEngine(ids("hello world") + [EOS, 5, 5])
    _, [events] = run_requests(engine, [prepared("a")])
    final = events[-1]
    assert isinstance(final, Finished) and final.termination is Termination.EOS
    assert final.termination.finish_reason == "stop"
    assert text_of(events) == "hello world"
    assert final.output_tokens == len(ids("hello world")) + 1  # EOS counted
    assert engine.released == 1
    _, [events] = run_requests(ScriptedEngine(ids("hello world")), [prepared("b", max_tokens=2)])
    assert events[-1].termination is Termination.LENGTH and events[-1].output_tokens == 2
    assert text_of(events) == TOKENIZER.decode(ids("hello world")[:2])


def test_string_stop_cancels_remaining_scheduling() -> None:
    tokens = ids("hello world again")
    engine = ScriptedEngine(tokens)
    _, [events] = run_requests(
        engine, [prepared("a", stops=StopSpec(strings=("lo w",)), observe_tokens=True)]
    )
    final = events[-1]
    assert final.termination is Termination.STOP and final.termination.finish_reason == "stop"
    assert text_of(events) == "hel"
    token_ids = [e.token_id for e in events if isinstance(e, TokenEvent)]
    # every sampled token is observed and counted, the one crossing the stop included
    assert token_ids == tokens[: len(token_ids)] and final.output_tokens == len(token_ids) < len(tokens)
    assert TOKENIZER.decode(token_ids).startswith("hello w")
    assert engine.released == 1


def test_stop_token_that_is_eos_and_prefix_flushed_at_eos() -> None:
    # the same token is EOS and a stop token: EOS semantics, finish_reason "stop", observed once
    engine = ScriptedEngine(ids("ab") + [EOS])
    _, [events] = run_requests(engine, [prepared("a", stops=StopSpec(token_ids=(EOS,)), observe_tokens=True)])
    assert events[-1].termination.finish_reason == "stop"
    assert [e.token_id for e in events if isinstance(e, TokenEvent)] == ids("ab") + [EOS]
    assert text_of(events) == "ab"
    # an unmatched stop prefix is flushed by EOS
    engine = ScriptedEngine(ids("xab") + [EOS])
    _, [events] = run_requests(engine, [prepared("b", stops=StopSpec(strings=("abc",)))])
    assert events[-1].termination is Termination.EOS and text_of(events) == "xab"


def test_timestamps_only_for_timed_requests() -> None:
    engine = ScriptedEngine(ids("hello") + [EOS])
    timed = prepared("t", observe_tokens=True, observe_timestamps=True)
    plain = prepared("p")
    runtime, [timed_events, plain_events] = run_requests(engine, [timed, plain])
    stamps = [e.timestamp_ns for e in timed_events if isinstance(e, TokenEvent)]
    assert len(stamps) == len(ids("hello")) + 1 and stamps == sorted(stamps) and stamps[0] >= 0
    assert all(e.timestamp_ns is None for e in plain_events if isinstance(e, TokenEvent))


def test_unobserved_requests_do_not_read_the_clock(monkeypatch) -> None:
    from helios.runtime.clock import ObservationClock

    def forbidden(self):
        raise AssertionError("clock read for an unobserved request")

    monkeypatch.setattr(ObservationClock, "now_ns", forbidden)
    _, [events] = run_requests(ScriptedEngine(ids("hi") + [EOS]), [prepared("a")])
    assert events[-1].termination is Termination.EOS


def test_admission_rejections_are_their_own_event() -> None:
    engine = ScriptedEngine([5] * 8)
    runtime, [events] = run_requests(engine, [prepared("a", max_tokens=100)], context=64)
    assert len(events) == 1 and isinstance(events[0], Rejected) and "context" in events[0].reason
    assert runtime.metrics().requests_rejected == 1 and engine.started == []
    _, [events] = run_requests(engine, [prepared("v", prompt=(VOCAB,))])
    assert isinstance(events[0], Rejected)


def test_queue_capacity_bounds_pending_requests() -> None:
    engine = ScriptedEngine([5] * 4, delay_s=0.01)
    limits = AdmissionLimits(max_active=1, queue_capacity=1)
    requests = [prepared(str(i), max_tokens=4) for i in range(3)]
    _, results = run_requests(engine, requests, limits=limits)
    kinds = [type(events[-1]).__name__ for events in results]
    assert kinds.count("Rejected") >= 1 and kinds.count("Finished") >= 1


def test_max_active_runs_requests_in_turn() -> None:
    engine = ScriptedEngine([5, 6, EOS], delay_s=0.005)
    requests = [prepared(str(i), prompt=(i + 1,)) for i in range(3)]
    runtime, results = run_requests(engine, requests, limits=AdmissionLimits(max_active=1, queue_capacity=4))
    assert engine.slots_in_use == set()
    assert all(events[-1].termination is Termination.EOS for events in results)
    assert engine.started == [(1,), (2,), (3,)]
    metrics = runtime.metrics()
    assert metrics.requests_started == 3 and metrics.requests_finished["eos"] == 3
    assert metrics.graph_launches == {"prefill": 3, "decode": 6}


def test_cancel_releases_the_generation() -> None:
    engine = ScriptedEngine([5] * 500, delay_s=0.005)

    async def cancel_soon(runtime, streams):
        await asyncio.sleep(0.05)
        runtime.cancel("a")

    runtime, [events] = run_requests(engine, [prepared("a", max_tokens=500)], during=cancel_soon)
    final = events[-1]
    assert final.termination is Termination.CANCELLED and final.termination.finish_reason is None
    assert 0 < final.output_tokens < 500
    deadline = time.time() + 2
    while engine.released != 1 and time.time() < deadline:
        time.sleep(0.01)
    assert engine.released == 1
    assert runtime.metrics().requests_active == 0


def test_execution_failure_does_not_stop_the_worker() -> None:
    def script(request):
        return [5, 6, 7, EOS]

    failing = ScriptedEngine(script, fail_at=2)
    runtime, [events] = run_requests(failing, [prepared("a")])
    assert isinstance(events[-1], Failed) and "device fault" in events[-1].message
    assert runtime.metrics().requests_failed == 1
    bad_id = ScriptedEngine([VOCAB + 1])
    _, [events] = run_requests(bad_id, [prepared("b")])
    assert isinstance(events[-1], Failed) and "outside the vocabulary" in events[-1].message
    # an engine that ends early (a full context) ends the request as an output limit
    early = ScriptedEngine([5])
    _, [events] = run_requests(early, [prepared("c")])
    assert events[-1].termination is Termination.LENGTH


def test_engine_rejection_waits_while_others_run_else_rejects() -> None:
    # a shortage while another request runs: the request waits for it and then runs
    busy = ScriptedEngine(
        [5, 6, 7, EOS], delay_s=0.01, reject=lambda request, engine: bool(engine.slots_in_use)
    )
    busy_rejections = (ShortOfPages,)
    limits = AdmissionLimits(max_active=2, queue_capacity=4)
    _, results = run_requests(busy, [prepared("a"), prepared("b")], limits=limits, rejections=busy_rejections)
    assert len(busy.started) == 2
    assert [events[-1].termination for events in results] == [Termination.EOS, Termination.EOS]
    # with nothing else running, the rejection is final: its own event
    never = ScriptedEngine([5], reject=lambda request, engine: True)
    runtime, [events] = run_requests(never, [prepared("c")], rejections=(ShortOfPages,))
    assert isinstance(events[-1], Rejected) and "no free pages" in events[-1].reason
    assert runtime.metrics().requests_rejected == 1


def test_health_follows_the_lifecycle() -> None:
    runtime = SequentialRuntime(ScriptedEngine([EOS]), AdmissionLimits(), context_tokens=64, vocab_size=VOCAB)
    assert runtime.health().status == "starting"
    runtime.start()
    assert runtime.health().ok
    runtime.shutdown()
    assert runtime.health().status == "stopped"


def test_prepared_request_validation() -> None:
    with pytest.raises(ValueError, match="observe_tokens"):
        prepared("x", observe_timestamps=True)


def test_a_request_naming_no_eos_ids_ends_at_the_cores() -> None:
    """The engine ends such a request at the core's EOS ids; the runtime must call it EOS, not length."""
    request = PreparedRequest("no-eos", GenerationRequest(prompt_token_ids=(1, 2), max_tokens=8),
                              OutputFilter(TOKENIZER, StopSpec()))

    async def main():
        runtime = SequentialRuntime(ScriptedEngine([*ids("ab"), EOS]), AdmissionLimits(max_active=1, queue_capacity=1),
                                context_tokens=4096, vocab_size=VOCAB, eos_token_ids=(EOS,))
        runtime.start()
        try:
            return await asyncio.wait_for(collect(runtime.submit(request)), 10)
        finally:
            runtime.shutdown()

    events = asyncio.run(main())
    final = events[-1]
    assert isinstance(final, Finished) and final.termination is Termination.EOS
    assert final.output_tokens == 3 and text_of(events) == "ab"


def test_the_scripted_engine_frees_a_slot_whose_generation_closed_before_its_first_id():
    """The test double keeps the engine seam's promise (closing the iterator releases its slot) even
    where the request was cancelled before its first id, as the real engines' generations do; the
    soak's idle check read a slot as leaked when it closed the bare generator instead."""
    engine = ScriptedEngine([5, 6, EOS])
    request = GenerationRequest(prompt_token_ids=(1, 2), max_tokens=4, eos_token_ids=(EOS,))
    generation = engine.generate(request, slot=0)
    assert engine.slots_in_use == {0}
    generation.close()
    generation.close()  # closing twice releases once
    assert engine.slots_in_use == set() and engine.released == 1
    assert list(engine.generate(request, slot=0)) == [5, 6, EOS]  # the slot is handed out again
    assert engine.slots_in_use == set() and engine.released == 2
